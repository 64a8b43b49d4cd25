"""Checkpoints with orbax: the latest few (model + data iterator state) and the best on validation.

DIR/checkpoints/<step>/{state, data}   every `checkpoint_every_steps`, at the end, on SIGTERM;
                                       `data` is the grain iterator state of every process, so a
                                       resumed run reads exactly the batches it would have read.
DIR/best/<step>/state                  the best `config.best_metric` on validation so far.

Restores take an abstract target carrying the *current* shardings, so a checkpoint written on
8 devices restores onto 1 (or the reverse).
"""
from __future__ import annotations

import copy
import os
from typing import Any, Optional, Union

import grain
import jax
import orbax.checkpoint as ocp

LATEST_DIR = 'checkpoints'
BEST_DIR = 'best'


class IteratorState(grain.DatasetIterator):
  """A grain iterator's state, frozen: what grain's orbax handler saves and restores.

  Orbax writes checkpoints in a background thread, when the live iterator may already have
  moved on; saving a snapshot taken at `save()` time keeps the saved position exact. On restore
  the handler puts the saved state here and the caller hands it to the live iterator.
  """

  def __init__(self, state: Any = None):
    super().__init__()
    self.state = copy.deepcopy(state)

  def __next__(self):
    raise TypeError('IteratorState holds a saved position; it yields nothing.')

  def get_state(self) -> Any:
    return self.state

  def set_state(self, state: Any) -> None:
    self.state = state

  def start_prefetch(self) -> None:  # called by grain's handler after set_state
    pass


def _multiprocess_options(name: str) -> dict:
  """The two managers (latest, best) save at the same steps: with several processes their orbax
  barriers need distinct keys, or one manager's barrier can release the other's finalize before
  every process has written (seen: "ArrayMetadata Store contains metadata from just one
  process"). Multi-process saves are also synchronous, the simplest orbax path."""
  if jax.process_count() == 1:
    return {}
  return dict(enable_async_checkpointing=False,
              multiprocessing_options=ocp.options.MultiprocessingOptions(
                  barrier_sync_key_prefix=name))


class Checkpointer:
  """Owns the two orbax managers of a workdir."""

  def __init__(self, workdir: str, *, keep: int = 2, best_metric: str = 'accuracy',
               best_mode: str = 'max', read_only: bool = False):
    workdir = os.path.abspath(workdir)
    self.latest = ocp.CheckpointManager(
        os.path.join(workdir, LATEST_DIR),
        options=ocp.CheckpointManagerOptions(max_to_keep=None if read_only else keep,
                                             create=not read_only,
                                             read_only=read_only, **_multiprocess_options('latest')))
    self.best_metric = best_metric
    self.best = ocp.CheckpointManager(
        os.path.join(workdir, BEST_DIR),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=None if read_only else 1,
            best_fn=lambda metrics: metrics[best_metric], best_mode=best_mode,
            keep_checkpoints_without_metrics=False, create=not read_only, read_only=read_only,
            **_multiprocess_options('best')))

  # -- saving -----------------------------------------------------------------------------------
  def save_latest(self, step: int, state: Any, data_iterator: Any, force: bool = False) -> None:
    if step in self.latest.all_steps():
      return
    self.latest.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=grain.checkpoint.CheckpointSave(IteratorState(data_iterator.get_state()))),
        force=force)

  def save_best(self, step: int, state: Any, metrics: dict[str, float]) -> None:
    if step in self.best.all_steps():
      return
    self.best.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)),
                   metrics={k: float(v) for k, v in metrics.items()})

  def wait(self) -> None:
    self.latest.wait_until_finished()
    self.best.wait_until_finished()

  def close(self) -> None:
    self.latest.close()
    self.best.close()

  # -- restoring --------------------------------------------------------------------------------
  def latest_step(self) -> Optional[int]:
    return self.latest.latest_step()

  def restore_for_resume(self, abstract_state: Any, data_iterator: Any) -> tuple[Any, int]:
    """The latest checkpoint into (state, step); `data_iterator` is set to its saved position."""
    step = self.latest.latest_step()
    saved_position = IteratorState()
    restored = self.latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        data=grain.checkpoint.CheckpointRestore(saved_position)))
    data_iterator.set_state(saved_position.state)
    return restored['state'], step

  def resolve(self, which: Union[str, int]) -> tuple[ocp.CheckpointManager, int]:
    """'best' | 'latest' | a step number -> (manager, step); a clear error if there is none."""
    which = str(which)
    if which == 'best':
      step = self.best.best_step()
      if step is None:
        raise FileNotFoundError(f'no best checkpoint in {self.best.directory}: the run has not '
                                'evaluated on validation yet; use --checkpoint latest.')
      return self.best, step
    if which == 'latest':
      step = self.latest.latest_step()
      if step is None:
        raise FileNotFoundError(f'no checkpoint in {self.latest.directory}: train first '
                                '(python train.py --config ... --workdir DIR).')
      return self.latest, step
    if not which.isdigit():
      raise ValueError(f"--checkpoint={which!r}: use 'best', 'latest' or a step number.")
    step = int(which)
    for manager in (self.latest, self.best):
      if step in manager.all_steps():
        return manager, step
    raise FileNotFoundError(f'no checkpoint at step {step}; kept steps: latest '
                            f'{list(self.latest.all_steps())}, best {list(self.best.all_steps())}.')

  def restore_state(self, which: Union[str, int], abstract_state: Any) -> tuple[Any, int]:
    manager, step = self.resolve(which)
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state)))
    return restored['state'], step
