"""`train_and_evaluate(config, workdir)`: the one training loop (train.py, tests and notebooks).

Per step: this process's slice of the batch -> global sharded arrays -> a jitted
`train_step(state, batch, rng)` with the state donated and the dropout rng folded with the step.
Validation every `eval_every_steps` (the best checkpoint is kept), checkpoints every
`checkpoint_every_steps` and at the end, automatic resume from the latest checkpoint of DIR,
SIGTERM -> save and stop cleanly, a non-finite loss -> stop naming the step without saving, and
at the end the best checkpoint is evaluated on test.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from poolformers_jax import data
from poolformers_jax.train import checkpoint as checkpoint_lib
from poolformers_jax.train import config_utils, init_from, mixing, sharding
from poolformers_jax.train import state as state_lib
from poolformers_jax.train.evaluate import evaluate_state, make_eval_step, write_eval_json
from poolformers_jax.train.metrics import MetricWriter
from poolformers_jax.train.setup import Setup, make_setup, process_slice, variables_of


class NonFiniteLossError(FloatingPointError):
  """The training loss became NaN or infinite; the message names the step."""


@dataclasses.dataclass
class TrainResult:
  state: Any
  step: int
  status: str                                  # 'finished' | 'preempted'
  validation: Optional[dict[str, float]]       # the last validation metrics of this run
  test: Optional[dict[str, float]]             # test metrics of the best checkpoint
  data_state: Any                              # the train iterator's state at the end


_MIXING_SALT = 0x6D6978   # folded into the step rng for mixup / cutmix (dropout uses the step rng)


def _mixing_kwargs(setup: Setup) -> dict[str, Any]:
  """mix_batch's keyword arguments from config.mixup, or {} when there is nothing to mix
  (validate.py has checked that the data are images to classify)."""
  mixup = setup.config.get('mixup', None)
  if mixup is None or (mixup.mixup_alpha <= 0 and mixup.cutmix_alpha <= 0):
    return {}
  return dict(mixup_alpha=float(mixup.mixup_alpha), cutmix_alpha=float(mixup.cutmix_alpha),
              switch_prob=float(mixup.get('switch_prob', 0.5)),
              label_smoothing=float(setup.config.label_smoothing))


def _all_finite(tree: Any) -> jax.Array:
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def example_weights(targets: Any) -> jax.Array:
  """Weight 1 for every example of a training batch; targets may be a pytree (pre-training:
  {'mlm': [B, L], 'sso': [B]}), whose leaves all lead with the batch axis."""
  return jnp.ones(jax.tree.leaves(targets)[0].shape[:1], jnp.float32)


def accumulator_shapes(setup: Setup, state: Any, batch: dict[str, Any]) -> Any:
  """Shapes of the task's sums for this batch (they may be arrays: a confusion matrix)."""
  def sums(state, batch):
    logits = setup.model.apply(variables_of(state), setup.task.model_inputs(batch),
                               deterministic=True)
    return setup.task.sums(logits, batch['targets'], example_weights(batch['targets']), 0.0)
  return jax.eval_shape(sums, state, batch)


def new_accumulator(mesh, sums_shapes: Any) -> dict[str, Any]:
  """Train metrics summed on device between log steps (fetched only there) and the NaN guard:
  `first_bad_step` is 0 until a step produces a non-finite objective or state, then that step."""
  acc = dict(sums=jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), sums_shapes),
             grad_norm=np.float32(0), steps=np.float32(0), learning_rate=np.float32(0),
             bad_loss=np.float32(0), first_bad_step=np.int32(0))
  return jax.device_put(acc, sharding.replicated(mesh))


def make_train_step(setup: Setup):
  """jit of `(state, acc, batch, rng) -> (state, acc)`; state and accumulator are donated.

  The guard: if the loss or any updated array (parameters, optimizer state) is not finite, the
  step returns the state it was given (so no non-finite state ever exists to be saved) and
  records the step in acc['first_bad_step']; the loop reads it at log / eval / checkpoint steps.
  """
  model, task, schedule = setup.model, setup.task, setup.schedule
  label_smoothing = float(setup.config.label_smoothing)
  accum = max(int(setup.config.optimizer.grad_accum_steps), 1)
  mix = _mixing_kwargs(setup)

  def train_step(state, acc, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    mutable = ['batch_stats'] if state.batch_stats is not None else False
    inputs, targets = task.model_inputs(batch), batch['targets']
    if mix:   # DeiT mixup / cutmix: soft targets, already label-smoothed
      inputs, targets = mixing.mix_batch(jax.random.fold_in(rng, _MIXING_SALT), inputs, targets,
                                         setup.info.num_classes, **mix)

    def loss_fn(params):
      out = model.apply({**variables_of(state), 'params': params}, inputs,
                        deterministic=False, rngs={'dropout': rng}, mutable=mutable)
      logits, updates = out if mutable else (out, {})
      sums = task.sums(logits, targets, example_weights(targets), label_smoothing)
      return task.objective(sums), (sums, updates)

    (objective, (sums, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    new_state = state.apply_gradients(grads=grads)
    if updates:
      new_state = new_state.replace(batch_stats=updates['batch_stats'])
    finite = jnp.isfinite(objective) & _all_finite(new_state)
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
    first_bad = (acc['first_bad_step'] == 0) & ~finite
    add = lambda total, value: total + jnp.where(finite, value, jnp.zeros_like(value))
    acc = {'sums': jax.tree.map(add, acc['sums'], sums),
           'grad_norm': add(acc['grad_norm'], optax.global_norm(grads)),
           'steps': add(acc['steps'], jnp.float32(1)),
           'learning_rate': jnp.asarray(schedule(state.step // accum), jnp.float32),
           'first_bad_step': jnp.where(first_bad, state.step + 1, acc['first_bad_step']),
           'bad_loss': jnp.where(first_bad, objective.astype(jnp.float32), acc['bad_loss'])}
    return new_state, acc

  replicated = sharding.replicated(setup.mesh)
  return jax.jit(train_step,
                 in_shardings=(setup.state_shardings, replicated, sharding.batch_sharded(setup.mesh),
                               replicated),
                 out_shardings=(setup.state_shardings, replicated), donate_argnums=(0, 1))


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
                     tokens_per_example: int) -> dict[str, float]:
  """The window's metrics from the fetched accumulator; rates exclude compilation (done before)."""
  out = setup.task.summary({k: np.asarray(v, np.float64) for k, v in acc['sums'].items()})
  out.pop('count', None)
  steps, seconds = max(float(acc['steps']), 1.0), max(seconds, 1e-9)
  out['grad_norm'] = float(acc['grad_norm']) / steps
  out['learning_rate'] = float(acc['learning_rate'])
  out['steps_per_second'] = steps / seconds
  out['examples_per_second'] = steps * int(setup.config.batch_size) / seconds
  if tokens_per_example:
    out['tokens_per_second'] = out['examples_per_second'] * tokens_per_example
  return out


def _non_finite_error(acc: dict[str, Any], checkpointer, resumed_from: Optional[int]
                      ) -> NonFiniteLossError:
  step, loss = int(acc['first_bad_step']), float(acc['bad_loss'])
  what = (f'training loss is {loss} at step {step}' if not np.isfinite(loss) else
          f'the update of step {step} is not finite (loss {loss:.4g})')
  last = checkpointer.latest_step()
  good = (f'the last good checkpoint is step {last} in {checkpointer.latest.directory}'
          if last is not None else 'no checkpoint was saved before it')
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
    self.first, self.last = (max(int(steps[0]), 1), int(steps[1])) if steps else (None, None)
    self.directory = os.path.join(workdir, 'profile')

  def start(self, step: int) -> None:
    if step == self.first:
      jax.profiler.start_trace(self.directory)

  def stop(self, step: int, state: Any) -> None:
    if step == self.last:
      jax.block_until_ready(state)
      jax.profiler.stop_trace()
      logging.info('profile of steps %d-%d written to %s', self.first, self.last, self.directory)


# Entered around every step that must not wait for the device (no log, eval, checkpoint or
# profile work). A no-op; tests replace it with a guard that fails on any device-to-host read.
HOT_PATH_GUARD = contextlib.nullcontext


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       stop_at: Optional[int] = None, start_over: bool = False) -> TrainResult:
  """Trains `config` in `workdir` (resuming from its newest checkpoint that verifies) and
  evaluates.

  `stop_at`: stop after this global step as if preempted (checkpoint saved, status 'preempted').
  `start_over`: when every checkpoint of `workdir` is damaged, train from step 0 instead of
  stopping with CheckpointError.
  """
  sharding.maybe_initialize_distributed()
  setup = make_setup(config)          # every config / data check; raises before compiling
  config = setup.config
  total_steps = int(config.num_train_steps)
  train_iter = data.make_train_iterator(config, seed=config.seed, **process_slice())
  if jax.process_index() == 0:
    config_utils.save_config(config, workdir)

  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=config.keep_checkpoints,
                                             best_metric=config.best_metric,
                                             best_mode=config.best_mode, config=config)
  rng = jax.random.PRNGKey(config.seed)
  init_rng, dropout_rng = jax.random.split(rng)
  try:
    resumed = checkpointer.restore_for_resume(setup.abstract_state, train_iter,
                                              start_over=start_over)
  except Exception:
    checkpointer.close()
    raise
  if resumed is not None:
    (state, step), resumed_from = resumed, resumed[1]
    logging.info('resumed from step %d in %s', step, workdir)
  else:
    state = state_lib.create_train_state(setup.model, setup.tx, setup.info, init_rng, setup.mesh)
    step, resumed_from = 0, None
    if config.get('init_from'):   # fine-tuning: parameters only, fresh optimizer and step
      state = init_from.init_state_from(state, config.init_from, config.get('init_from_fresh', ''))
  logging.info('model %s: %d parameters', config.model.name, state_lib.param_count(state.params))

  tokens = int(np.prod(setup.info.input_shape)) if setup.info.vocab_size is not None else 0
  eval_step = make_eval_step(setup)
  writer = MetricWriter(workdir, total_steps=total_steps, initial_step=step,
                        progress_bar=config.progress_bar)
  profiler = _Profiler(config.get('profile_steps'), workdir)
  next_batch = lambda: sharding.global_batch(next(train_iter), setup.mesh)
  status, validation, compile_seconds = 'finished', None, None
  try:
    if step < total_steps:
      batch = next_batch()
      sums_shapes = accumulator_shapes(setup, state, batch)
      acc = new_accumulator(setup.mesh, sums_shapes)
      started = time.time()
      train_step = make_train_step(setup).lower(state, acc, batch, dropout_rng).compile()
      compile_seconds = time.time() - started
      logging.info('train step compiled in %.1f s', compile_seconds)
    window_start = time.time()

    def check_finite(fetched=None):
      fetched = fetched or {'first_bad_step': jax.device_get(acc['first_bad_step'])}
      if int(fetched['first_bad_step']):
        raise _non_finite_error(jax.device_get(acc), checkpointer, resumed_from)

    with _Preemption() as preemption:
      while step < total_steps:
        nxt = step + 1
        sync = (_due(nxt, config.log_every_steps) or _due(nxt, config.eval_every_steps)
                or _due(nxt, config.checkpoint_every_steps) or nxt in (total_steps, stop_at,
                                                                        profiler.last))
        # The hot path: dispatch the step, then read the next batch while the device runs it;
        # nothing here waits for the device (grain's threads prefetch the batches themselves).
        with contextlib.nullcontext() if sync else HOT_PATH_GUARD():
          profiler.start(nxt)
          state, acc = train_step(state, acc, batch, dropout_rng)
          step = nxt
          writer.progress(1)
          stop = preemption.should_stop() or step == stop_at
          if not (sync or stop):
            batch = next_batch()
            continue

        if _due(step, config.log_every_steps) or step == total_steps:
          fetched = jax.device_get(acc)
          check_finite(fetched)
          metrics = _summarize_train(setup, fetched, time.time() - window_start, tokens)
          if compile_seconds is not None:
            metrics['compile_seconds'], compile_seconds = compile_seconds, None
          writer.write(step, 'train', metrics)
          writer.progress(0, loss=metrics['loss'])
          acc, window_start = new_accumulator(setup.mesh, sums_shapes), time.time()
        else:
          check_finite()             # one scalar: nothing non-finite may be evaluated or saved
        checkpointer.poll()          # integrity records of saves finished since
        sync_started = time.time()   # eval / checkpoint time is left out of the train rates
        if _due(step, config.eval_every_steps) or step == total_steps:
          validation = evaluate_state(setup, state, 'validation', eval_step=eval_step)
          writer.write(step, 'validation', validation)
          checkpointer.save_best(step, state, validation)
        if _due(step, config.checkpoint_every_steps) or step == total_steps:
          checkpointer.save_latest(step, state, train_iter)
        profiler.stop(step, state)
        if stop:
          status = 'preempted'
          checkpointer.save_latest(step, state, train_iter, force=True)
          break
        if step < total_steps:
          batch = next_batch()
        window_start += time.time() - sync_started

    checkpointer.wait()
    test = None
    if status == 'finished' and config.final_test:
      which = 'best' if checkpointer.best.best_step() is not None else 'latest'
      best_state, best_step = checkpointer.restore_state(which, setup.abstract_state)
      test = evaluate_state(setup, best_state, 'test', eval_step=eval_step)
      test = {**test, 'step': best_step, 'checkpoint': which, 'split': 'test'}
      writer.write(step, 'test', test)
      write_eval_json(workdir, 'test', test)
  finally:
    writer.close()
    with contextlib.suppress(Exception):
      checkpointer.wait()
    checkpointer.close()
  return TrainResult(state=state, step=step, status=status, validation=validation, test=test,
                     data_state=train_iter.get_state())
