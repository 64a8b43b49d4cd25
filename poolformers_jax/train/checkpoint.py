"""Checkpoints with orbax: the latest few (model + data iterator state) and the best on validation.

DIR/checkpoints/<step>/{state, data}   every `checkpoint_every_steps`, at the end, on SIGTERM;
                                       `data` is the grain iterator state of every process, so a
                                       resumed run reads exactly the batches it would have read.
DIR/best/<step>/state                  the best `config.best_metric` on validation so far.
DIR/averaged/<step>/{state, averaged}  the mean parameters of the last N latest checkpoints
                                       (`python -m poolformers_jax.average`; <step> = the newest
                                       of them, whose other state it keeps; `averaged` lists them).

Restores take an abstract target carrying the *current* shardings, so a checkpoint written on
8 devices restores onto 1 (or the reverse).

Every step directory also gets `integrity.json` once orbax has finished writing it (integrity.py)
and every restore verifies it. Resume walks back from the newest checkpoint to the newest one
that verifies, one log line per damaged one, which is moved to DIR/rejected/ (never deleted);
when none verifies it stops with one line unless the caller asked to start over.
"""
from __future__ import annotations

import copy
import logging
import os
import shutil
from typing import Any, Optional, Union

import grain
import jax
import orbax.checkpoint as ocp

from poolformers_jax.train import integrity

LATEST_DIR = 'checkpoints'
BEST_DIR = 'best'
AVERAGED_DIR = 'averaged'
REJECTED_DIR = 'rejected'


class CheckpointError(ValueError):
  """No usable checkpoint (damaged, or none where one is needed); the message says what to do."""


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


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


class Checkpointer:
  """Owns the two orbax managers of a workdir and the integrity records of their steps."""

  def __init__(self, workdir: str, *, keep: int = 2, best_metric: str = 'accuracy',
               best_mode: str = 'max', read_only: bool = False, config: Any = None):
    workdir = os.path.abspath(workdir)
    self.workdir = workdir
    self.read_only = read_only
    self._config_sha256 = integrity.config_hash(config)
    self._pending: list[tuple[ocp.CheckpointManager, int, dict]] = []   # records to write
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
    self.averaged = ocp.CheckpointManager(
        os.path.join(workdir, AVERAGED_DIR),
        options=ocp.CheckpointManagerOptions(max_to_keep=None if read_only else 1,
                                             create=not read_only, read_only=read_only,
                                             **_multiprocess_options('averaged')))

  # -- saving -----------------------------------------------------------------------------------
  def _save(self, manager: ocp.CheckpointManager, step: int, state: Any, args: dict,
            **kwargs) -> None:
    leaves = integrity.leaf_records(state)   # on device, before the state is donated again
    self._write_records(manager)             # the previous save of `manager` has finished
    if manager.save(step, args=ocp.args.Composite(**args), **kwargs):
      self._pending.append((manager, step, leaves))
      if jax.process_count() > 1:   # synchronous saves (_multiprocess_options): done already
        self._write_records(manager)

  def _write_records(self, manager: Optional[ocp.CheckpointManager] = None,
                     wait: bool = True) -> None:
    """Integrity records of finished saves: written only once orbax has committed the step.
    `wait=False` (every log step): only those whose save has finished, without waiting."""
    todo = [p for p in self._pending if manager is None or p[0] is manager]
    if not wait:
      todo = [p for p in todo if not p[0].is_saving_in_progress()]
    for m in {id(p[0]): p[0] for p in todo}.values():
      m.wait_until_finished()
    for m, step, leaves in todo:
      step_dir = os.path.join(str(m.directory), str(step))
      if jax.process_index() == 0 and os.path.isdir(step_dir):   # may be gone (max_to_keep)
        integrity.write_record(step_dir, step, leaves, self._config_sha256)
      self._pending.remove((m, step, leaves))
    if todo:
      _sync('integrity_records')

  def save_latest(self, step: int, state: Any, data_iterator: Any, force: bool = False) -> None:
    if step in self.latest.all_steps():
      return
    self._save(self.latest, step, state, dict(
        state=ocp.args.StandardSave(state),
        data=grain.checkpoint.CheckpointSave(IteratorState(data_iterator.get_state()))),
        force=force)

  def save_best(self, step: int, state: Any, metrics: dict[str, float]) -> None:
    if step in self.best.all_steps():
      return
    self._save(self.best, step, state, dict(state=ocp.args.StandardSave(state)),
               metrics={k: float(v) for k, v in metrics.items()})

  def save_averaged(self, step: int, state: Any, averaged_steps: list[int]) -> None:
    """`state` (the mean parameters of `averaged_steps`) as DIR/averaged/<step>; replaces the
    previous average (the same step is overwritten)."""
    if step in self.averaged.all_steps():
      self.averaged.delete(step)
    self._save(self.averaged, step, state, dict(
        state=ocp.args.StandardSave(state),
        averaged=ocp.args.JsonSave({'steps': [int(s) for s in averaged_steps]})))
    self._write_records(self.averaged)

  def wait(self) -> None:
    self._write_records()

  def poll(self) -> None:
    """Writes the records of saves that have finished since; cheap, called at log steps, so a
    kill -9 finds a record on every checkpoint but (at most) the one written last."""
    if self._pending:
      self._write_records(wait=False)

  def close(self) -> None:
    self.latest.close()
    self.best.close()
    self.averaged.close()

  # -- restoring --------------------------------------------------------------------------------
  def latest_step(self) -> Optional[int]:
    return self.latest.latest_step()

  def _step_dir(self, manager: ocp.CheckpointManager, step: int) -> str:
    return os.path.join(str(manager.directory), str(step))

  def _verified_restore(self, manager: ocp.CheckpointManager, step: int, abstract_state: Any,
                        data_position: Optional[IteratorState] = None,
                        partial: bool = False) -> Any:
    """The state of `step`, checked against its integrity record (CheckpointDamaged if not).
    `partial`: `abstract_state` is a dict of some of the state's fields ({'params': ...}); only
    those are read (and verified)."""
    step_dir = self._step_dir(manager, step)
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
      args['data'] = grain.checkpoint.CheckpointRestore(data_position)
    try:
      restored = manager.restore(step, args=ocp.args.Composite(**args))
    except Exception as error:  # pylint: disable=broad-except  (any read failure = damage)
      raise integrity.CheckpointDamaged(integrity.short_reason(error)) from None
    integrity.verify_leaves(record, restored['state'], partial=partial)
    return restored['state']

  def _reject(self, manager: ocp.CheckpointManager, step: int, why: Optional[str] = None) -> str:
    """Moves a damaged step to DIR/rejected/<checkpoints|best>-<step> (kept for inspection);
    `why` replaces the manager's name (DIR/rejected/diverged-checkpoints-<step>)."""
    target = os.path.join(self.workdir, REJECTED_DIR,
                          f'{why or os.path.basename(str(manager.directory))}-{step}')
    _sync('reject_before')
    if jax.process_index() == 0:
      os.makedirs(os.path.dirname(target), exist_ok=True)
      suffix, final = 0, target
      while os.path.exists(final):
        suffix += 1
        final = f'{target}.{suffix}'
      shutil.move(self._step_dir(manager, step), final)
    _sync('reject_after')
    manager.reload()
    return target

  def reject_unconfirmed(self, first_bad_step: int) -> list[int]:
    """A checkpoint is good once the step after it was finite: on a non-finite step
    `first_bad_step`, the latest and best checkpoints from step `first_bad_step - 1` on (finite,
    but possibly exploded: the update before a NaN step is often ~1e29) are moved to
    DIR/rejected/diverged-<checkpoints|best>-<step>, so that neither the error, a resume nor
    `--checkpoint best` uses them. Returns their steps."""
    self.wait()   # a save of one of them may still be in flight
    steps = set()
    for manager in (self.latest, self.best):
      for step in sorted(s for s in manager.all_steps() if s >= first_bad_step - 1):
        self._reject(manager, step, why=f'diverged-{os.path.basename(str(manager.directory))}')
        steps.add(step)
    return sorted(steps)

  def _rejected_before(self) -> list[str]:
    root = os.path.join(self.workdir, REJECTED_DIR)
    return sorted(n for n in os.listdir(root) if n.startswith(LATEST_DIR)) if os.path.isdir(
        root) else []

  def restore_for_resume(self, abstract_state: Any, data_iterator: Any, *,
                         start_over: bool = False) -> Optional[tuple[Any, int]]:
    """The newest checkpoint that verifies, as (state, step), with `data_iterator` set to its
    saved position; None when there is none to resume (a fresh run).

    Damaged steps are logged (one line each) and moved to DIR/rejected/. If none verifies,
    CheckpointError, unless `start_over` (then None: train from step 0)."""
    steps = sorted(self.latest.all_steps(), reverse=True)
    damaged = []
    for i, step in enumerate(steps):
      position = IteratorState()
      try:
        state = self._verified_restore(self.latest, step, abstract_state, position)
      except integrity.CheckpointDamaged as reason:
        after = f'falling back to {steps[i + 1]}' if i + 1 < len(steps) else 'no older checkpoint'
        logging.warning('checkpoint %d is damaged (%s); %s', step, reason, after)
        self._reject(self.latest, step)
        damaged.append(step)
        continue
      data_iterator.set_state(position.state)
      return state, step
    rejected = self._rejected_before()
    if rejected and not start_over:
      raise CheckpointError(
          f'no checkpoint in {self.latest.directory} verifies (damaged: '
          f'{", ".join(rejected)}, moved to {os.path.join(self.workdir, REJECTED_DIR)}); '
          'run again with --start_over to train from step 0, or use another --workdir')
    if rejected:
      logging.warning('no checkpoint verifies (damaged ones are in %s): --start_over, training '
                      'from step 0.', os.path.join(self.workdir, REJECTED_DIR))
    return None

  def resolve(self, which: Union[str, int]) -> tuple[ocp.CheckpointManager, int]:
    """'best' | 'latest' | 'averaged' | a step number -> (manager, step); a clear error if there
    is none."""
    which = str(which)
    if which == 'averaged':
      step = self.averaged.latest_step()
      if step is None:
        raise CheckpointError(f'no averaged checkpoint in {self.averaged.directory}: run python '
                              f'-m poolformers_jax.average --workdir {self.workdir} --last N first')
      return self.averaged, step
    if which == 'best':
      step = self.best.best_step()
      if step is None:
        raise CheckpointError(f'no best checkpoint in {self.best.directory}: the run has not '
                              'evaluated on validation yet; use --checkpoint latest')
      return self.best, step
    if which == 'latest':
      step = self.latest.latest_step()
      if step is None:
        raise CheckpointError(f'no checkpoint in {self.latest.directory}: train first '
                              '(python train.py --config ... --workdir DIR)')
      return self.latest, step
    if not which.isdigit():
      raise CheckpointError(f"--checkpoint={which!r}: use 'best', 'latest', 'averaged' or a step "
                            'number')
    step = int(which)
    for manager in (self.latest, self.best):
      if step in manager.all_steps():
        return manager, step
    raise CheckpointError(f'no checkpoint at step {step}; kept steps: latest '
                          f'{list(self.latest.all_steps())}, best {list(self.best.all_steps())}')

  def restore_latest_steps(self, steps: list[int], abstract_state: Any):
    """Yields (step, verified state) of each of `steps` of DIR/checkpoints, one at a time."""
    for step in steps:
      try:
        yield step, self._verified_restore(self.latest, step, abstract_state)
      except integrity.CheckpointDamaged as reason:
        raise CheckpointError(f'checkpoint {self._step_dir(self.latest, step)} is damaged '
                              f'({reason}); average fewer (--last) or other steps') from None

  def restore_state(self, which: Union[str, int], abstract_state: Any,
                    partial: bool = False) -> tuple[Any, int]:
    """The verified state of `which`; a damaged one raises CheckpointError naming what differs.
    `partial`: some fields of the state only (`_verified_restore`)."""
    manager, step = self.resolve(which)
    try:
      return self._verified_restore(manager, step, abstract_state, partial=partial), step
    except integrity.CheckpointDamaged as reason:
      kept = sorted(set(self.latest.all_steps()) | set(self.best.all_steps()) - {step})
      raise CheckpointError(
          f'checkpoint {self._step_dir(manager, step)} is damaged ({reason}); evaluate another '
          f'one (--checkpoint latest, best or a step of {kept})') from None


def holds_checkpoints(workdir: str) -> bool:
  """Whether DIR/checkpoints has a step directory: a run that train.py resumes."""
  directory = os.path.join(workdir, LATEST_DIR)
  return os.path.isdir(directory) and any(name.isdigit() for name in os.listdir(directory))


STATE_FIELDS = ('step', 'params', 'opt_state', 'batch_stats')   # train/state.py's TrainState


def _is_partial(abstract_state: Any) -> bool:
  """A dict of some of the train state's fields ({'params': ...}), not the whole state."""
  if not isinstance(abstract_state, dict):
    return False
  unknown = sorted(set(abstract_state) - set(STATE_FIELDS))
  if unknown:
    raise ValueError(f'restore_for_reading: {unknown} are no fields of a train state; pass '
                     f'the whole state (make_setup(config).abstract_state) or a dict of some of '
                     f'{list(STATE_FIELDS)} (e.g. {{"params": abstract_state.params}})')
  return True


def restore_for_reading(workdir: str, config, which: Union[str, int],
                        abstract_state: Any) -> tuple[Any, int]:
  """(state, step) of checkpoint `which` (best | latest | averaged | a step) of a run, opened
  read-only and closed again: THE way a run is read (eval.py, translate, load_run).
  `abstract_state`: the whole train state's (make_setup(config).abstract_state), or a dict of
  some of its fields ({'params': abstract_state.params}: only those are read, and a dict of them
  is returned); its shardings place the restored arrays."""
  partial = _is_partial(abstract_state)
  # A finished run may keep only best/ (benchmarks/listops_column.py packs it so).
  if not any(os.path.isdir(os.path.join(workdir, name))
             for name in (LATEST_DIR, BEST_DIR, AVERAGED_DIR)):
    raise CheckpointError(f'{workdir} holds no training run (no {LATEST_DIR}/ nor {BEST_DIR}/); '
                          'pass the --workdir of a train.py run')
  checkpointer = Checkpointer(workdir, best_metric=config.best_metric, best_mode=config.best_mode,
                              read_only=True)
  try:
    return checkpointer.restore_state(which, abstract_state, partial=partial)
  finally:
    checkpointer.close()
