"""The optimizer factory: AdamW + warmup/decay schedule + clipping + masked weight decay.

Everything comes from an `OptimizerSettings` (trainer/setup.py fills it from `config.optimizer`,
whose keys and defaults are `config.base_config`'s, and `config.num_train_steps`). The schedule
counts optimizer updates: with gradient accumulation over k micro-batches (optax.MultiSteps) the
run makes `num_train_steps // k` updates; warmup is given in micro-batch steps.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax
import jax.numpy as jnp
import optax

# Parameters never decayed: biases, normalisation scales and position embeddings
# (docs/papers/hvt.md: HVT excludes position embeddings; the usual practice for biases and norms).
NO_DECAY_NAMES = ('bias', 'scale', 'pos_embedding', 'cls')


def weight_decay_mask(params: Any) -> Any:
  """True where weight decay applies: kernels and embeddings, never biases/norms/positions."""
  flat = flax.traverse_util.flatten_dict(params)
  mask = {path: not any(name in NO_DECAY_NAMES for name in path) and value.ndim > 1
          for path, value in flat.items()}
  return flax.traverse_util.unflatten_dict(mask)


# PyTorch's OneCycleLR (two phases, anneal_strategy='linear'), as the LRA code of Nystromformer /
# PoNet builds it (run_tasks.py: pct_start = warmup / steps, the other arguments at their
# defaults): update k uses the value at k; phase one peaks at step warmup - 1, phase two ends at
# total - 1, and later steps keep the end value. Momentum (beta1, `cycle_momentum`) runs the other
# way: 0.95 -> 0.85 at the peak -> 0.95.
DIV_FACTOR, FINAL_DIV_FACTOR = 25.0, 1e4
BASE_MOMENTUM, MAX_MOMENTUM = 0.85, 0.95


def one_cycle_phases(warmup: int, total: int) -> tuple[float, float]:
  """The ends of OneCycleLR's two phases, as PyTorch computes them (in double precision)."""
  total = max(int(total), 1)
  pct_start = min(max(warmup, 0), total) / total
  return float(pct_start * total) - 1.0, float(total - 1)


def _two_phase(start: float, peak: float, end: float, warmup: int, total: int) -> optax.Schedule:
  """start -> peak linearly over phase one, peak -> end over phase two: OneCycleLR's
  (b - a) * pct + a written as a * (1 - pct) + b * pct with both weights from integers, so float32
  keeps the ~1e-10 learning rates of the last steps to ~1e-7 relative (PyTorch computes in
  double)."""
  rise_end, last = one_cycle_phases(warmup, total)

  def lerp(a, b, step, begin, finish):
    if finish <= begin:    # a phase of no length (warmup 1: PyTorch divides by zero there)
      return jnp.full_like(step, b)
    return a * ((finish - step) / (finish - begin)) + b * ((step - begin) / (finish - begin))

  def schedule(count):
    step = jnp.minimum(jnp.asarray(count, jnp.float32), max(last, 0.0))
    return jnp.where(step <= rise_end, lerp(start, peak, step, 0.0, rise_end),
                     lerp(peak, end, step, rise_end, last))
  return schedule


def _one_cycle(peak: float, warmup: int, total: int) -> optax.Schedule:
  start = peak / DIV_FACTOR
  return _two_phase(start, peak, start / FINAL_DIV_FACTOR, warmup, total)


def one_cycle_b1(warmup: int, total: int) -> optax.Schedule:
  """beta1 of OneCycleLR's `cycle_momentum`: 0.95 -> 0.85 (at the peak) -> 0.95."""
  return _two_phase(MAX_MOMENTUM, BASE_MOMENTUM, MAX_MOMENTUM, warmup, total)


def _with_warmup(decay: Callable[[float, int], optax.Schedule]):
  def build(peak: float, warmup: int, total: int) -> optax.Schedule:
    after = decay(peak, max(total - warmup, 1))
    if warmup <= 0:
      return after
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])
  return build


def _cosine(peak: float, warmup: int, total: int) -> optax.Schedule:
  # optax's linear warmup from 0 + cosine to 0; its decay_steps count the warmup steps too.
  return optax.warmup_cosine_decay_schedule(0.0, peak, max(warmup, 0),
                                            max(warmup, 0) + max(total - warmup, 1))


def _inverse_sqrt(peak: float, warmup: int, total: int) -> optax.Schedule:
  # Vaswani et al. (2017), Eq. 3: linear warmup to the peak, then peak * sqrt(warmup / step).
  del total
  warmup = max(warmup, 1)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, peak, warmup),
       lambda count: peak * jnp.sqrt(warmup / (warmup + count))], [warmup])


SCHEDULES: dict[str, Callable[[float, int, int], optax.Schedule]] = {
    'constant': _with_warmup(lambda peak, n: optax.constant_schedule(peak)),
    'cosine': _cosine,
    'linear': _with_warmup(lambda peak, n: optax.linear_schedule(peak, 0.0, n)),
    'one_cycle': _one_cycle,
    'inverse_sqrt': _inverse_sqrt,
}


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
  """AdamW, its schedule, clipping and accumulation: `config.optimizer`'s keys, plus the run's
  length in micro-batch steps (`config.num_train_steps`)."""
  total_steps: int
  learning_rate: float = 1e-3   # the peak, after warmup
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  weight_decay: float = 0.0
  schedule: str = 'constant'
  cycle_momentum: bool = False
  warmup_steps: int = 0
  grad_clip_norm: float = 0.0
  grad_accum_steps: int = 1

  def updates(self) -> tuple[int, int]:
    """(warmup, total) counted in optimizer updates: micro-batch steps // grad_accum_steps (>= 1,
    as the config check ensures)."""
    accum = int(self.grad_accum_steps)
    return self.warmup_steps // accum, self.total_steps // accum


def make_schedule(opt: OptimizerSettings) -> optax.Schedule:
  if opt.schedule not in SCHEDULES:
    raise ValueError(f'config.optimizer.schedule={opt.schedule!r}; choose one of '
                     f'{sorted(SCHEDULES)}.')
  return SCHEDULES[opt.schedule](opt.learning_rate, *opt.updates())


def make_optimizer(opt: OptimizerSettings) -> optax.GradientTransformation:
  return make_optimizer_and_schedule(opt)[0]


def make_optimizer_and_schedule(
    opt: OptimizerSettings) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """(the optimizer `opt` describes, the learning-rate schedule per update it steps with)."""
  chain = []
  if opt.grad_clip_norm > 0:
    chain.append(optax.clip_by_global_norm(opt.grad_clip_norm))
  adamw, b1 = optax.adamw, opt.b1
  if opt.cycle_momentum:
    if opt.schedule != 'one_cycle':
      raise ValueError(f'config.optimizer.cycle_momentum=True needs schedule one_cycle (got '
                       f'{opt.schedule!r}); set cycle_momentum=False or schedule=one_cycle.')
    adamw = optax.inject_hyperparams(optax.adamw, static_args=('mask',))
    b1 = one_cycle_b1(*opt.updates())
  schedule = make_schedule(opt)
  chain.append(adamw(schedule, b1=b1, b2=opt.b2, eps=opt.eps,
                     weight_decay=opt.weight_decay, mask=weight_decay_mask))
  tx = optax.chain(*chain)
  if opt.grad_accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=int(opt.grad_accum_steps))
  return tx, schedule
