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
  """mix_batch's keyword arguments from config.mixup, or {} when there is nothing to mix."""
  mixup = setup.config.get('mixup', None)
  if mixup is None or (mixup.mixup_alpha <= 0 and mixup.cutmix_alpha <= 0):
    return {}
  if setup.info.task != 'classification' or len(setup.info.input_shape) != 3:
    raise ValueError(f'config.mixup is for image classification; dataset {setup.info.name!r} is '
                     f'{setup.info.task!r} with inputs {setup.info.input_shape}: remove '
                     'config.mixup.')
  return dict(mixup_alpha=float(mixup.mixup_alpha), cutmix_alpha=float(mixup.cutmix_alpha),
              switch_prob=float(mixup.get('switch_prob', 0.5)),
              label_smoothing=float(setup.config.label_smoothing))


def make_train_step(setup: Setup):
  model, task, schedule = setup.model, setup.task, setup.schedule
  label_smoothing = float(setup.config.label_smoothing)
  accum = max(int(setup.config.optimizer.grad_accum_steps), 1)
  mix = _mixing_kwargs(setup)

  def train_step(state, batch, rng):
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
      weights = jnp.ones(targets.shape[:1], jnp.float32)
      sums = task.sums(logits, targets, weights, label_smoothing)
      return task.objective(sums), (sums, updates)

    (objective, (sums, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    new_state = state.apply_gradients(grads=grads)
    if updates:
      new_state = new_state.replace(batch_stats=updates['batch_stats'])
    metrics = {**sums, 'objective': objective, 'grad_norm': optax.global_norm(grads),
               'learning_rate': schedule(state.step // accum)}
    return new_state, metrics

  replicated = sharding.replicated(setup.mesh)
  return jax.jit(train_step,
                 in_shardings=(setup.state_shardings, sharding.batch_sharded(setup.mesh), replicated),
                 out_shardings=(setup.state_shardings, replicated), donate_argnums=0)


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


_NOT_SUMS = ('objective', 'grad_norm', 'learning_rate')   # per-step values in the train metrics


def _summarize_train(setup: Setup, window: list[dict[str, float]], seconds: float) -> dict[str, float]:
  totals = {k: sum(np.asarray(m[k], np.float64) for m in window)
            for k in window[0] if k not in _NOT_SUMS}
  out = setup.task.summary(totals)
  out.pop('count', None)
  out['grad_norm'] = float(np.mean([m['grad_norm'] for m in window]))
  out['learning_rate'] = window[-1]['learning_rate']
  out['steps_per_second'] = len(window) / max(seconds, 1e-9)
  return out


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       stop_at: Optional[int] = None) -> TrainResult:
  """Trains `config` in `workdir` (resuming from its latest checkpoint) and evaluates.

  `stop_at`: stop after this global step as if preempted (checkpoint saved, status 'preempted').
  """
  sharding.maybe_initialize_distributed()
  setup = make_setup(config)          # raises on a bad dataset name / missing files
  config = setup.config
  total_steps = int(config.num_train_steps)
  train_iter = data.make_train_iterator(config, seed=config.seed, **process_slice())
  sharding.check_batch_size(config.batch_size, setup.mesh, 'batch_size')
  if jax.process_index() == 0:
    config_utils.save_config(config, workdir)

  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=config.keep_checkpoints,
                                             best_metric=config.best_metric,
                                             best_mode=config.best_mode)
  rng = jax.random.PRNGKey(config.seed)
  init_rng, dropout_rng = jax.random.split(rng)
  if checkpointer.latest_step() is not None:
    state, step = checkpointer.restore_for_resume(setup.abstract_state, train_iter)
    logging.info('resumed from step %d in %s', step, workdir)
  else:
    state, step = state_lib.create_train_state(setup.model, setup.tx, setup.info, init_rng,
                                               setup.mesh), 0
    if config.get('init_from'):   # fine-tuning: parameters only, fresh optimizer and step
      state = init_from.init_state_from(state, config.init_from, config.get('init_from_fresh', ''))
  logging.info('model %s: %d parameters', config.model.name, state_lib.param_count(state.params))

  train_step = make_train_step(setup)
  eval_step = make_eval_step(setup)
  writer = MetricWriter(workdir, total_steps=total_steps, initial_step=step,
                        progress_bar=config.progress_bar)
  status, validation, window, window_start = 'finished', None, [], time.time()
  try:
    with _Preemption() as preemption:
      while step < total_steps:
        batch = sharding.global_batch(next(train_iter), setup.mesh)
        state, metrics = train_step(state, batch, dropout_rng)
        step += 1
        metrics = jax.device_get(metrics)      # numpy; sums may be arrays (a confusion matrix)
        loss = float(metrics['objective'])
        if not np.isfinite(loss):
          checkpointer.wait()
          raise NonFiniteLossError(
              f'training loss is {loss} at step {step}: stopped without saving; the last good '
              f'checkpoint is step {checkpointer.latest_step()} in {checkpointer.latest.directory}. '
              'Lower the learning rate, enable clipping (config.optimizer.grad_clip_norm) or '
              'check the data.')
        window.append(metrics)
        writer.progress(1, loss=loss)
        if _due(step, config.log_every_steps) or step == total_steps:
          writer.write(step, 'train', _summarize_train(setup, window, time.time() - window_start))
          window, window_start = [], time.time()
        if _due(step, config.eval_every_steps) or step == total_steps:
          validation = evaluate_state(setup, state, 'validation', eval_step=eval_step)
          writer.write(step, 'validation', validation)
          checkpointer.save_best(step, state, validation)
        if _due(step, config.checkpoint_every_steps) or step == total_steps:
          checkpointer.save_latest(step, state, train_iter)
        if preemption.should_stop() or step == stop_at:
          status = 'preempted'
          checkpointer.save_latest(step, state, train_iter, force=True)
          break

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
