"""Checkpoints: the latest few (model + data iterator state), the best on validation, averages.

DIR/checkpoints/<step>/{state, data}   every `checkpoint_every_steps`, at the end, on SIGTERM;
                                       `data`: every process's grain iterator state, so a resumed
                                       run reads exactly the batches it would have read.
DIR/best/<step>/state                  the best `config.best_metric` on validation so far.
DIR/averaged/<step>/{state, averaged}  the mean parameters of the last N latest checkpoints
                                       (`python -m poolformers_jax.average`).

The `Checkpointer` asks the policy (trainer/checkpoint_policy.py) and has the storage
(trainer/checkpoint_storage.py: an orbax manager per kind, with integrity records) do it. Every
step directory gets `integrity.json` once orbax has written it, and every restore verifies it;
resume walks back to the newest checkpoint that verifies, moving damaged ones to DIR/rejected/.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import orbax.checkpoint as ocp

from poolformers_jax import config as config_lib
from poolformers_jax.trainer import checkpoint_policy as policy, integrity
from poolformers_jax.trainer.checkpoint_policy import (  # noqa: F401  (the public names)
  AVERAGED_DIR,
  BEST_DIR,
  LATEST_DIR,
  REJECTED_DIR,
  CheckpointError,
)
from poolformers_jax.trainer.checkpoint_storage import Store, listdir


def _iterator_state():
  """The module of the data position saved beside the state (grain: loaded only to save or
  resume, so reading a run needs none)."""
  from poolformers_jax.trainer import iterator_state  # pylint: disable=g-import-not-at-top
  return iterator_state

class Checkpointer:
  """The checkpoints of a workdir: three stores (latest, best, averaged) run by the policy."""

  def __init__(self, workdir: str, *, keep: int = 2, best_metric: str = 'accuracy',
               best_mode: str = 'max', read_only: bool = False,
               config_sha256: str | None = None):
    config_sha256 = config_lib.config_hash(None) if config_sha256 is None else config_sha256
    self.workdir = os.path.abspath(workdir)
    self.rejected_dir = os.path.join(self.workdir, REJECTED_DIR)
    self.best_metric, self.best_mode = best_metric, best_mode
    retention = policy.Retention.of(keep, read_only)
    common: dict[str, Any] = dict(read_only=read_only, config_sha256=config_sha256)
    self.latest = Store(self.workdir, LATEST_DIR, keep=retention.latest, **common)
    self.best = Store(self.workdir, BEST_DIR, keep=retention.best, best_mode=best_mode,
                      best_fn=lambda metrics: metrics[best_metric], **common)
    self.averaged = Store(self.workdir, AVERAGED_DIR, keep=retention.averaged, **common)
    self._best_entries: list[tuple[int, float | None]] | None = None   # _best_kept

  # -- saving -----------------------------------------------------------------------------------
  def save_latest(self, step: int, state: Any, data_iterator: Any, force: bool = False) -> None:
    if step in self.latest.steps():
      return
    self.latest.save(step, state, dict(state=ocp.args.StandardSave(state),
                                       data=_iterator_state().save_args(data_iterator)),
                     force=force)

  def save_best(self, step: int, state: Any, metrics: dict[str, float]) -> None:
    """Saved only if it becomes the best (policy.saves_best); orbax then drops the previous."""
    value = float(metrics[self.best_metric])
    if not policy.saves_best(step, value, self._best_kept(), self.best_mode):
      return
    if self.best.save(step, state, dict(state=ocp.args.StandardSave(state)),
                      metrics={k: float(v) for k, v in metrics.items()}):
      self._best_entries = [(step, value)]   # Retention.best = 1: only it is kept

  def save_averaged(self, step: int, state: Any, averaged_steps: list[int]) -> None:
    """`state` (the mean parameters of `averaged_steps`) as DIR/averaged/<step>; replaces the
    previous average (the same step is overwritten)."""
    if step in self.averaged.steps():
      self.averaged.delete(step)
    self.averaged.save(step, state, dict(
        state=ocp.args.StandardSave(state),
        averaged=ocp.args.JsonSave({'steps': [int(s) for s in averaged_steps]})))
    self.averaged.write_records()

  def wait(self) -> None:
    for store in (self.latest, self.best, self.averaged):
      store.write_records()

  def poll(self) -> None:
    """Writes the records of saves that have finished since; cheap, called at log steps, so a
    kill -9 finds a record on every checkpoint but (at most) the last written."""
    for store in (self.latest, self.best, self.averaged):
      store.write_records(wait=False)

  def close(self) -> None:
    """Closes every store; an error of one stops none of the others (ExitStack)."""
    with contextlib.ExitStack() as stack:
      for store in (self.latest, self.best, self.averaged):
        stack.callback(store.close)

  # -- what is kept -----------------------------------------------------------------------------
  def latest_step(self) -> int | None:
    return self.latest.latest_step()

  def _best_kept(self) -> list[tuple[int, float | None]]:
    """(step, metric value) of the kept best checkpoints; read from disk once, then tracked."""
    if self._best_entries is None:
      self._best_entries = [(s, (self.best.metrics(s) or {}).get(self.best_metric))
                            for s in self.best.steps()]
    return self._best_entries

  def best_step(self) -> int | None:
    """The best kept checkpoint's step (policy.best_step); None when there is none."""
    return policy.best_step(self._best_kept(), self.best_mode)

  # -- rejecting --------------------------------------------------------------------------------
  def _reject(self, store: Store, step: int, prefix: str = '') -> str:
    """Moves a step to DIR/rejected/<prefix><checkpoints|best>-<step> (kept for inspection)."""
    if store is self.best:
      self._best_entries = None
    return store.move_to(step, os.path.join(self.rejected_dir, f'{prefix}{store.name}-{step}'))

  def reject_unconfirmed(self, first_bad_step: int) -> list[int]:
    """Moves the checkpoints a non-finite step `first_bad_step` leaves unconfirmed to
    DIR/rejected/diverged-<checkpoints|best>-<step> (no resume nor `--checkpoint best` uses them);
    returns their steps."""
    self.wait()   # a save of one of them may still be in flight
    steps = set()
    for store in (self.latest, self.best):
      for step in policy.unconfirmed(store.steps(), first_bad_step):
        self._reject(store, step, prefix='diverged-')
        steps.add(step)
    return sorted(steps)

  # -- restoring --------------------------------------------------------------------------------
  def restore_for_resume(self, abstract_state: Any, data_iterator: Any, *,
                         start_over: bool = False) -> tuple[Any, int] | None:
    """The newest checkpoint that verifies, as (state, step), with `data_iterator` set to its
    saved position; None for a fresh run. If none verifies, CheckpointError, unless `start_over`
    (then None: train from step 0)."""
    order = policy.resume_order(self.latest.steps())
    for step in order:
      position = _iterator_state().IteratorState()
      try:
        state = self.latest.restore_verified(step, abstract_state, position)
      except integrity.CheckpointDamaged as reason:
        logging.warning('checkpoint %d is damaged (%s); %s', step, reason,
                        policy.fallback(order, step))
        self._reject(self.latest, step)
        continue
      data_iterator.set_state(position.state)
      return state, step
    rejected = listdir(self.rejected_dir)
    verdict = policy.when_none_verifies(rejected, start_over)
    if verdict == 'stop':
      raise policy.none_verifies_error(self.latest.directory, self.rejected_dir, rejected)
    if verdict == 'start_over':
      logging.warning('no checkpoint verifies (damaged ones are in %s): --start_over, training '
                      'from step 0.', self.rejected_dir)
    return None

  def resolve(self, which: str | int) -> tuple[Store, int]:
    """'best' | 'latest' | 'averaged' | a step -> (store, step); a clear error if there is none."""
    kind, step = policy.resolve(
        which, latest=self.latest.steps(), best_steps=self.best.steps(),
        best=self.best_step() if str(which) == 'best' else None,
        averaged=self.averaged.latest_step(), where=self.workdir)
    return {LATEST_DIR: self.latest, BEST_DIR: self.best, AVERAGED_DIR: self.averaged}[kind], step

  def restore_latest_steps(self, steps: list[int], abstract_state: Any):
    """Yields (step, verified state) of each of `steps` of DIR/checkpoints, one at a time."""
    for step in steps:
      try:
        yield step, self.latest.restore_verified(step, abstract_state)
      except integrity.CheckpointDamaged as reason:
        raise policy.damaged_error(self.latest.step_dir(step), reason, averaging=True) from None

  def restore_state(self, which: str | int, abstract_state: Any,
                    partial: bool = False) -> tuple[Any, int]:
    """The verified state of `which`; a damaged one raises CheckpointError naming what differs.
    `partial`: some fields of the state only (Store.restore_verified)."""
    store, step = self.resolve(which)
    try:
      return store.restore_verified(step, abstract_state, partial=partial), step
    except integrity.CheckpointDamaged as reason:
      others = (set(self.latest.steps()) | set(self.best.steps())) - {step}
      raise policy.damaged_error(store.step_dir(step), reason, kept_steps=others) from None


def holds_checkpoints(workdir: str) -> bool:
  """Whether DIR/checkpoints has a step directory: a run that train.py resumes."""
  return any(name.isdigit() for name in listdir(os.path.join(workdir, LATEST_DIR)))


def finished_steps(workdir: str) -> list[int]:
  """The steps of DIR/checkpoints whose save finished (their integrity record is written)."""
  directory = os.path.join(workdir, LATEST_DIR)
  return sorted(int(name) for name in listdir(directory) if name.isdigit()
                and os.path.exists(os.path.join(directory, name, integrity.RECORD)))


STATE_FIELDS = ('step', 'params', 'opt_state', 'batch_stats')   # trainer/setup.py's TrainState


def _check_fields(fields: Any) -> None:
  """Refuses `fields` unless a dict of some of the train state's fields ({'params': ...})."""
  if not isinstance(fields, dict):
    raise TypeError(f'restore_for_reading reads some fields of a train state: pass a dict of some '
                    f'of {list(STATE_FIELDS)} (e.g. {{"params": abstract_state.params}}), not a '
                    f'{type(fields).__name__}; the whole state: restore_state_for_reading')
  unknown = sorted(set(fields) - set(STATE_FIELDS))
  if unknown:
    raise ValueError(f'restore_for_reading: {unknown} are no fields of a train state; pass a '
                     f'dict of some of {list(STATE_FIELDS)} (e.g. {{"params": '
                     'abstract_state.params}) or the whole state to restore_state_for_reading')


def _read(workdir: str, config, which: str | int, abstract: Any, partial: bool):
  """Checkpoint `which` of a run, opened read-only and closed again."""
  # A finished run may keep only best/ (benchmarks/listops_column.py packs it so).
  if not any(os.path.isdir(os.path.join(workdir, name)) for name in policy.KINDS):
    raise CheckpointError(f'{workdir} holds no training run (no {LATEST_DIR}/ nor {BEST_DIR}/); '
                          'pass the --workdir of a train.py run')
  checkpointer = Checkpointer(workdir, best_metric=config.best_metric, best_mode=config.best_mode,
                              read_only=True)
  try:
    return checkpointer.restore_state(which, abstract, partial=partial)
  finally:
    checkpointer.close()


def restore_for_reading(workdir: str, config, which: str | int,
                        fields: dict[str, Any]) -> tuple[dict[str, Any], int]:
  """({field: value}, step) of checkpoint `which` (best | latest | averaged | a step) of a run
  (load_run). `fields`: some of the abstract train state's fields ({'params':
  make_setup(config).abstract_state.params}): only those are read, placed by their shardings."""
  _check_fields(fields)
  return _read(workdir, config, which, fields, partial=True)


def restore_state_for_reading(workdir: str, config, which: str | int,
                              abstract_state: Any) -> tuple[Any, int]:
  """(the whole train state, step) of checkpoint `which` of a run (eval.py); `abstract_state`:
  make_setup(config).abstract_state."""
  if isinstance(abstract_state, dict):
    raise TypeError('restore_state_for_reading reads the whole train state: pass '
                    'make_setup(config).abstract_state; a dict of some fields: restore_for_reading')
  return _read(workdir, config, which, abstract_state, partial=False)
