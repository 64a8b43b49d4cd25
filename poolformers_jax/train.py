r"""Training: `train_and_evaluate(config, workdir)`, the training loop, and the program that runs
it (docs/training.md says every setting and file).

    python -m poolformers_jax.train --config configs/<task>.py[:words] --workdir DIR [--config.k=v]
                                      (or `python train.py ...`, `poolformers-jax train ...`)

--config is a config file, or a shipped one by name (`lra_listops:ponet,tiny`:
`poolformers_jax.config.resolve`). Exit codes: 2 for bad input (one `error: ...` line;
--verbose_errors for the traceback), 1 for a diverged run (non-finite loss), 3 for a fault of the
machine (a full disk, a lost process, a step larger than the memory: trainer/faults.py).
Multi-process (--distributed=auto, the default): under SLURM, Open MPI, a Cloud TPU pod or
Kubernetes jax finds the processes itself; elsewhere set JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID (or the flags of those names) on every process.

The loop, per step: this process's slice of the batch -> global sharded arrays
(config.length_buckets: length-grouped micro-batches) -> the training step (trainer/step.py,
compiled before the first batch is read) with state and metric accumulator donated.
Validation every `eval_every_steps` (the best checkpoint is kept) on the whole split, or on
`eval_num_batches` batches of an endless validation stream checkpointed with the train iterator
(the LRA reference protocol); checkpoints every `checkpoint_every_steps` and at the end; resume
from the newest checkpoint that verifies; SIGTERM saves and stops; a non-finite loss stops naming
the step, saving nothing after it; at the end the best checkpoint is tested. The train records
say how the run uses the machine (trainer/utilisation.py). `num_train_steps=0` (a fresh run, e.g.
from `init_from`): the initial state is validated, saved as step 0 and tested.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from poolformers_jax import extras

extras.require('train', __name__)   # first: a missing extra names itself

import jax
import ml_collections
import numpy as np
from absl import flags

from poolformers_jax import cli, config as config_lib, data
from poolformers_jax.data import bad_records
from poolformers_jax.eval import evaluate_state, hypotheses_path, write_eval_json
from poolformers_jax.trainer import (
  checkpoint as checkpoint_lib,
  faults,
  init_check,
  init_from,
  run_lock,
  sharding,
  step as step_lib,
  utilisation,
)
from poolformers_jax.trainer.metrics import MetricWriter, format_metrics
from poolformers_jax.trainer.setup import (
  Setup,
  create_train_state,
  param_count,
  process_slice,
  setup_with_config,
)


class NonFiniteLossError(FloatingPointError):
  """The training loss became NaN or infinite; the message names the step."""


@dataclasses.dataclass
class TrainResult:
  state: Any
  step: int
  status: str                                  # 'finished' | 'preempted'
  validation: dict[str, float] | None       # the last validation metrics of this run
  test: dict[str, float] | None             # test metrics of the best checkpoint
  data_state: Any                              # the train iterator's state at the end
  train_step_memory: dict[str, int] | None  # memory_analysis() of the compiled step (step.py)


class _Preemption:
  """SIGTERM sets a flag the loop checks after every step (the handler only sets the flag)."""

  def __init__(self):
    self.requested = False
    self._previous = None

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def _handle(self, signum, frame):
    del signum, frame
    logging.warning('SIGTERM received: saving a checkpoint and stopping.')
    self.requested = True

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)

  def should_stop(self) -> bool:
    if jax.process_count() == 1:
      return self.requested
    # Every process must agree on the step at which to stop.
    from jax.experimental import multihost_utils
    return bool(np.any(multihost_utils.process_allgather(np.asarray(self.requested))))


def _due(step: int, every: int) -> bool:
  """Every `every` steps; 0 or less = only at the end."""
  return every > 0 and step % every == 0


def _summarize_train(setup: Setup, acc: dict[str, Any], seconds: float,
                     tokens_per_example: int, skipping: bool) -> dict[str, float]:
  """The window's metrics from the fetched accumulator; rates exclude compilation (done before).
  `skipping`: bad records are skipped (config.data.skip_bad_records), and counted here."""
  out = setup.task.summary({k: np.asarray(v, np.float64) for k, v in acc['sums'].items()})
  out.pop('count', None)
  steps, seconds = max(float(acc['steps']), 1.0), max(seconds, 1e-9)
  out['grad_norm'] = float(acc['grad_norm']) / steps
  out['update_norm'] = float(acc['update_norm']) / steps
  out['param_norm'] = float(acc['param_norm'])
  out['learning_rate'] = float(acc['learning_rate'])
  out['steps_per_second'] = steps / seconds
  out['examples_per_second'] = steps * setup.batch_size / seconds
  if tokens_per_example:
    out['tokens_per_second'] = out['examples_per_second'] * tokens_per_example
  if skipping:   # this process's, so far
    out['skipped_records'] = float(sum(bad_records.skipped().values()))
  return out


def _non_finite_error(step: int, loss: float, *, unconfirmed: list[int],
                      last_good: int | None, latest_dir: str, rejected_dir: str,
                      resumed_from: int | None) -> NonFiniteLossError:
  """The error of a non-finite step `step`, after its unconfirmed checkpoints were moved aside
  (Checkpointer.reject_unconfirmed)."""
  what = (f'training loss is {loss} at step {step}' if not np.isfinite(loss) else
          f'the update of step {step} is not finite (loss {loss:.4g})')
  good = (f'the last good checkpoint is step {last_good} in {latest_dir}'
          if last_good is not None else 'no checkpoint was saved before it' if not unconfirmed
          else 'no good checkpoint is kept')
  if unconfirmed:
    good += (f' (checkpoint {", ".join(map(str, unconfirmed))}, saved right before the step '
             'that diverged, is not confirmed by a finite step after it: moved to '
             f'{rejected_dir})')
  resumed = (f', or the checkpoint of step {resumed_from} this run resumed from'
             if resumed_from else '')
  return NonFiniteLossError(
      f'{what}: stopped without saving anything after step {step - 1}; {good}. Causes to check: '
      f'the examples of step {step} (the data){resumed}, or a learning rate too high for this '
      'model without clipping (config.optimizer.grad_clip_norm).')


class _Profiler:
  """config.profile_steps = (first, last): a jax.profiler trace of those steps in DIR/profile
  (TensorBoard's profile tab or Perfetto)."""

  def __init__(self, steps, workdir: str):
    self.first: int | None = max(int(steps[0]), 1) if steps else None
    self.last: int | None = int(steps[1]) if steps else None
    self.directory = os.path.join(workdir, 'profile')

  def start(self, step: int) -> None:
    if step == self.first:
      jax.profiler.start_trace(self.directory)

  def stop(self, step: int, state: Any) -> None:
    if step == self.last:
      jax.block_until_ready(state)
      jax.profiler.stop_trace()
      logging.info('profile of steps %d-%d written to %s', self.first, self.last, self.directory)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       start_over: bool = False,
                       distributed: str | None = None) -> TrainResult:
  """Trains `config` in `workdir` (resuming from its newest checkpoint that verifies) and
  evaluates.

  `start_over`: when every checkpoint of `workdir` is damaged, train from step 0 instead of
  stopping with CheckpointError. A workdir another live process trains is refused
  (run_lock.RunInProgressError) before anything is read or compiled. `distributed`: None trains
  in the process(es) as they are; 'auto', 'on' or 'off' first starts a multi-process run
  (sharding.maybe_initialize_distributed), as the programs do from --distributed. The machine's
  faults raise errors.MachineFault (trainer/faults.py).
  """
  if distributed is not None:
    sharding.maybe_initialize_distributed(distributed)
  try:
    with run_lock.RunLock(workdir, enabled=jax.process_index() == 0):
      return _train_and_evaluate(config, workdir, start_over=start_over)
  except Exception as error:  # pylint: disable=broad-except  (the machine's faults, reworded)
    fault = faults.machine_fault(error, workdir)
    if fault is None or fault is error:
      raise
    raise fault from error


def _train_and_evaluate(given: ml_collections.ConfigDict, workdir: str, *,
                        start_over: bool) -> TrainResult:
  resume = checkpoint_lib.holds_checkpoints(workdir)   # a resume continues the run's own model
  # The config completed once (on a resume: the run's model) and every config / data check;
  # raises before compiling. Every line below reads that completed config.
  config, setup = setup_with_config(
      given, run_dir=workdir if resume else None,
      todo='resume with the config the run was trained with, or train this one in another '
      '--workdir')
  if config.init_from and not resume:   # the run it starts from: same positions, learned
    init_check.check_init_source(config)
  total_steps = int(config.num_train_steps)
  # config.json (process 0) and the hash every checkpoint carries, before anything is read.
  config_sha256 = config_lib.record_run(config, workdir, write=jax.process_index() == 0)
  train_iter = data.make_train_iterator(setup.data, batch_size=setup.batch_size,
                                        seed=int(config.seed), **process_slice())
  validation_stream = (data.make_eval_stream(setup.data, 'validation', setup.eval_batch_size,
                                              seed=config.seed + 1, **process_slice())
                       if config.eval_num_batches > 0 else None)
  data_position = data.Streams(train=train_iter, validation=validation_stream)
  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=config.keep_checkpoints,
                                             best_metric=config.best_metric,
                                             best_mode=config.best_mode,
                                             config_sha256=config_sha256)
  init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  try:
    resumed = checkpointer.restore_for_resume(setup.abstract_state, data_position,
                                              start_over=start_over)
  except Exception:
    checkpointer.close()
    raise
  if resumed is not None:
    (state, step), resumed_from = resumed, resumed[1]
    logging.info('resumed from step %d in %s', step, workdir)
  else:
    state = create_train_state(setup, init_rng)
    step, resumed_from = 0, None
    if config.init_from:   # fine-tuning: parameters only, fresh optimizer and step
      state = init_from.init_state_from(state, config.init_from, config.init_from_fresh,
                                        config.init_from_allow_missing)
  logging.info('model %s: %d parameters', config.model.name, param_count(state.params))

  tokens = int(np.prod(setup.info.input_shape)) if setup.info.vocab_size is not None else 0
  eval_step = step_lib.make_eval_step(setup)
  writer = MetricWriter(workdir, total_steps=total_steps, initial_step=step,
                        progress_bar=config.progress_bar, writers=config.writers)
  writer.write_hparams(config.to_dict())
  usage = utilisation.Utilisation(   # FLOP/s, the wait for data, memory
      train_iter, worker_count=setup.data.worker_count, read_threads=setup.data.read_threads)
  profiler = _Profiler(config.profile_steps, workdir)
  status, validation, memory = 'finished', None, None
  try:
    if step < total_steps:
      started = time.time()
      compiled = step_lib.compile_train_step(setup)
      compile_seconds, memory, train_step = time.time() - started, compiled.memory, compiled.run
      logging.info('train step compiled in %.1f s; %.1f MiB per device', compile_seconds,
                   memory['total'] / 2**20)
      faults.check_step_memory(memory, setup)   # refused here, not killed by the kernel
      usage.compiled(setup, compiled, compile_seconds)
      acc = compiled.new_accumulator(setup.mesh)
      next_batch = lambda: compiled.put(usage.data.next())   # global arrays (or micro-batches)
      batch = next_batch()
    elif total_steps == 0 and resumed is None:   # nothing to train (init_from, then evaluate):
      validation = evaluate_state(config, setup, state, 'validation', eval_step=eval_step)
      writer.write(step, 'validation', validation)  # step 0 becomes the run's best and latest
      checkpointer.save_best(step, state, validation)   # checkpoint, which eval.py reads too
      checkpointer.save_latest(step, state, train_iter)
    window_start = time.time()
    writer.start_clock()

    def check_finite(fetched=None):
      """A non-finite step stops the run, the checkpoints it leaves unconfirmed moved aside."""
      fetched = fetched or {'first_bad_step': jax.device_get(acc['first_bad_step'])}
      if int(fetched['first_bad_step']):
        bad = jax.device_get(acc)
        bad_step = int(bad['first_bad_step'])
        raise _non_finite_error(
            bad_step, float(bad['bad_loss']), unconfirmed=checkpointer.reject_unconfirmed(bad_step),
            last_good=checkpointer.latest_step(), latest_dir=checkpointer.latest.directory,
            rejected_dir=checkpointer.rejected_dir, resumed_from=resumed_from)

    with _Preemption() as preemption:
      while step < total_steps:
        nxt = step + 1
        sync = (_due(nxt, config.log_every_steps) or _due(nxt, config.eval_every_steps)
                or _due(nxt, config.checkpoint_every_steps) or nxt in (total_steps, profiler.last))
        # The hot path: dispatch the step, then read the next batch while the device runs it;
        # nothing here waits for the device (grain's threads prefetch the batches themselves).
        profiler.start(nxt)
        state, acc = train_step(state, acc, batch, dropout_rng)
        step = nxt
        stop = preemption.should_stop()
        if not (sync or stop):
          batch = next_batch()
          continue

        if _due(step, config.log_every_steps) or step == total_steps:
          fetched = jax.device_get(acc)
          check_finite(fetched)
          seconds = time.time() - window_start
          metrics = _summarize_train(setup, fetched, seconds, tokens,
                                     setup.data.skip_bad_records)
          metrics.update(usage.window(metrics['steps_per_second'], seconds, step))
          writer.write(step, 'train', metrics)
          postfix = {'loss': metrics['loss']}
          acc, window_start = compiled.new_accumulator(setup.mesh), time.time()
        else:
          check_finite()             # one scalar: nothing non-finite may be evaluated or saved
          postfix = {}
        writer.progress(step, **postfix)   # the fetch above waited for every step up to `step`
        checkpointer.poll()          # integrity records of saves finished since
        sync_started = time.time()   # eval / checkpoint time is left out of the train rates
        if _due(step, config.eval_every_steps) or step == total_steps:
          batches = (None if validation_stream is None else
                     itertools.islice(validation_stream, config.eval_num_batches))
          validation = evaluate_state(config, setup, state, 'validation', eval_step=eval_step,
                                      batches=batches)
          writer.write(step, 'validation', validation)
          checkpointer.save_best(step, state, validation)
        if _due(step, config.checkpoint_every_steps) or step == total_steps:
          checkpointer.save_latest(step, state, data_position)
        profiler.stop(step, state)
        if stop:
          status = 'preempted'
          checkpointer.save_latest(step, state, data_position, force=True)
          break
        window_start += time.time() - sync_started
        if step < total_steps:       # the wait for data counts in the window
          batch = next_batch()

    checkpointer.wait()
    test: dict[str, Any] | None = None
    if status == 'finished' and config.final_test:
      which = 'best' if checkpointer.best_step() is not None else 'latest'
      best_state, best_step = checkpointer.restore_state(which, setup.abstract_state)
      test = evaluate_state(config, setup, best_state, 'test', eval_step=eval_step,
                            outputs_path=hypotheses_path(workdir, 'test'))
      test = {**test, 'step': best_step, 'checkpoint': which, 'split': 'test'}
      writer.write(step, 'test', test)
      write_eval_json(workdir, 'test', test)
  except BaseException:
    for close in (checkpointer.wait, checkpointer.close, writer.close):
      with contextlib.suppress(Exception):   # report the error that stopped the run, not these
        close()
    raise
  with contextlib.suppress(Exception):
    checkpointer.wait()
  checkpointer.close()
  writer.close()
  if setup.data.skip_bad_records:
    logging.warning(bad_records.report())
  return TrainResult(state=state, step=step, status=status, validation=validation, test=test,
                     data_state=train_iter.get_state(), train_step_memory=memory)


def _train() -> None:
  result = train_and_evaluate(cli.config_value(flags.FLAGS['config']), flags.FLAGS.workdir,
                              start_over=flags.FLAGS.start_over)
  logging.info('%s at step %d; validation: %s; test: %s', result.status, result.step,
               format_metrics(result.validation), format_metrics(result.test))


def main(argv: Sequence[str] | None = None) -> None:
  cli.define_flags()
  cli.define_config_flag(argv)
  flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and config.json.')
  flags.DEFINE_bool('start_over', False, 'When no checkpoint of DIR verifies (all damaged), '
                    'train from step 0 instead of stopping.')
  cli.start(__name__, _train, argv, required=('config', 'workdir'))


if __name__ == '__main__':
  main()
