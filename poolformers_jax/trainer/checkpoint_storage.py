"""Checkpoint storage: an orbax manager of a workdir (DIR/checkpoints, DIR/best or DIR/averaged)
with the integrity records of its steps, verified restores and moves of a step to DIR/rejected/.
It decides nothing (trainer/checkpoint_policy.py does). Restores take an abstract target with
the *current* shardings, so a checkpoint written on 8 devices restores onto 1 (or the reverse).
A save that fails for want of disk space leaves nothing a resume would read (`_discard`: the
partial step is removed, which also gives its space back) and raises errors.DiskFull naming the
step.
"""
from __future__ import annotations

import contextlib
import gc
import os
import shutil
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax
import orbax.checkpoint as ocp

from poolformers_jax import errors
from poolformers_jax.trainer import integrity

if TYPE_CHECKING:
  from poolformers_jax.trainer.iterator_state import IteratorState


def _multiprocess_options(name: str) -> dict:
  """The managers (latest, best) save at the same steps: with several processes their orbax
  barriers need distinct keys, or one manager's barrier can release the other's finalize before
  every process has written (seen: "ArrayMetadata Store contains metadata from just one
  process"). Multi-process saves are also synchronous, the simplest orbax path."""
  if jax.process_count() == 1:
    return {}
  return dict(enable_async_checkpointing=False,
              multiprocessing_options=ocp.options.MultiprocessingOptions(
                  barrier_sync_key_prefix=name))


def sync(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


class Store:
  """DIR/<name>/<step>/...: an orbax manager and the integrity records of its steps. `keep`:
  steps kept (None: all); with `best_fn` / `best_mode` the best `keep` by that metric."""

  def __init__(self, workdir: str, name: str, *, keep: int | None, read_only: bool,
               config_sha256: str, best_fn: Callable[[dict], float] | None = None,
               best_mode: str = 'max'):
    self.name = name
    self.directory = os.path.join(workdir, name)
    self._config_sha256 = config_sha256
    self._pending: list[tuple[int, dict]] = []   # (step, leaf records) whose records are due
    best = dict(best_fn=best_fn, best_mode=best_mode,
                keep_checkpoints_without_metrics=False) if best_fn else {}
    self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=not read_only, read_only=read_only, **best,
        **_multiprocess_options(name)))

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def metrics(self, step: int) -> dict | None:
    return self.manager.metrics(step)

  def step_dir(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  # -- saving -----------------------------------------------------------------------------------
  def save(self, step: int, state: Any, args: dict, **kwargs) -> bool:
    """Saves (asynchronously with one process); the integrity record follows once orbax has
    finished (`write_records`). False: orbax did not save (a step not newer than its newest)."""
    leaves = integrity.leaf_records(state)   # on device, before the state is donated again
    self.write_records()                     # the previous save has finished
    with self._discarded_if_disk_full([step]):
      saved = self.manager.save(step, args=ocp.args.Composite(**args), **kwargs)
    if saved:
      self._pending.append((step, leaves))
      if jax.process_count() > 1:   # synchronous saves (_multiprocess_options): done already
        self.write_records()
      return True
    return False

  def write_records(self, wait: bool = True) -> None:
    """Integrity records of finished saves: written only once orbax has committed the step.
    `wait=False` (every log step): only if the save has finished, without waiting."""
    if not self._pending or (not wait and self.manager.is_saving_in_progress()):
      return
    with self._discarded_if_disk_full([step for step, _ in self._pending]):
      self.manager.wait_until_finished()
      for step, leaves in self._pending:
        step_dir = self.step_dir(step)
        if jax.process_index() == 0 and os.path.isdir(step_dir):   # may be gone (max_to_keep)
          integrity.write_record(step_dir, step, leaves, self._config_sha256)
    self._pending = []
    sync('integrity_records')

  def _what(self, step: int) -> str:
    kind = {'checkpoints': ''}.get(self.name, self.name + ' ')
    return f'the {kind}checkpoint of step {step} ({self.step_dir(step)})'

  @contextlib.contextmanager
  def _discarded_if_disk_full(self, steps: list[int]) -> Iterator[None]:
    """Inside: a full disk discards the unfinished saves of `steps` and raises DiskFull."""
    try:
      yield
    except Exception as error:  # pylint: disable=broad-except  (only a full disk is handled)
      if not errors.is_disk_full(error):
        raise
      self._pending = [(s, leaves) for s, leaves in self._pending if s not in steps]
      self._discard(steps)
      raise errors.DiskFull(self._what(steps[-1]), self.directory) from error

  def _discard(self, steps: list[int]) -> None:
    """Removes what the failed saves of `steps` left: orbax's temporary folders, and a step
    folder without its integrity record (process 0; the space they hold is given back)."""
    if jax.process_index() == 0:
      for name in listdir(self.directory):
        step = name.split('.', 1)[0]
        finished = name == step and os.path.exists(os.path.join(self.directory, name,
                                                                integrity.RECORD))
        if step.isdigit() and int(step) in steps and not finished:
          shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
    with contextlib.suppress(Exception):   # orbax may still hold the failed save's error
      self.manager.reload()
    gc.collect()   # the failed save's writer coroutines end now, not at exit (noise after the line)

  def delete(self, step: int) -> None:
    self.manager.delete(step)

  def close(self) -> None:
    """Waits for the saves in flight (a full disk: DiskFull, their partial steps removed)."""
    steps = [step for step, _ in self._pending]
    with self._discarded_if_disk_full(steps) if steps else contextlib.nullcontext():
      self.manager.close()

  # -- restoring --------------------------------------------------------------------------------
  def restore_verified(self, step: int, abstract_state: Any,
                       data_position: IteratorState | None = None,
                       partial: bool = False) -> Any:
    """The state of `step`, checked against its integrity record (CheckpointDamaged if not).
    `partial`: `abstract_state` is a dict of some of the state's fields ({'params': ...}); only
    those are read (and verified)."""
    step_dir = self.step_dir(step)
    record = integrity.read_record(step_dir)
    integrity.check_structure(record, abstract_state, step_dir, partial=partial)
    integrity.verify_files(record, step_dir)
    if partial:   # StandardRestore has no partial form; PyTreeRestore reads the same files
      restore_args = jax.tree.map(lambda a: ocp.ArrayRestoreArgs(sharding=a.sharding),
                                  abstract_state)
      args = {'state': ocp.args.PyTreeRestore(item=abstract_state, restore_args=restore_args,
                                              partial_restore=True)}
    else:
      args = {'state': ocp.args.StandardRestore(abstract_state)}
    if data_position is not None:
      import grain  # pylint: disable=g-import-not-at-top  (the train extra)
      args['data'] = grain.checkpoint.CheckpointRestore(data_position)
    try:
      restored = self.manager.restore(step, args=ocp.args.Composite(**args))
    except Exception as error:  # pylint: disable=broad-except  (any read failure = damage)
      raise integrity.CheckpointDamaged(integrity.short_reason(error)) from None
    integrity.verify_leaves(record, restored['state'], partial=partial)
    return restored['state']

  def move_to(self, step: int, target: str) -> str:
    """Moves `step` to `target` (`target.1`, ... if taken; process 0, every process waits) and
    forgets it. Returns `target`."""
    sync('reject_before')
    if jax.process_index() == 0:
      os.makedirs(os.path.dirname(target), exist_ok=True)
      suffix, final = 0, target
      while os.path.exists(final):
        suffix += 1
        final = f'{target}.{suffix}'
      shutil.move(self.step_dir(step), final)
    sync('reject_after')
    self.manager.reload()
    return target


def listdir(path: str) -> list[str]:
  """The names in `path`; none when it does not exist."""
  return sorted(os.listdir(path)) if os.path.isdir(path) else []
