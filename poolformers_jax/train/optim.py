"""The optimizer factory: AdamW + warmup/decay schedule + clipping + masked weight decay.

Everything comes from `config.optimizer` (its keys and defaults: configs_lib.base_config). The schedule
counts optimizer updates: with gradient accumulation over k micro-batches (optax.MultiSteps) the
run makes `num_train_steps // k` updates, and warmup is given in micro-batch steps like everything
else.
"""
from __future__ import annotations

from typing import Any, Callable

import flax
import jax
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


def _one_cycle(peak: float, warmup: int, total: int) -> optax.Schedule:
  # PyTorch OneCycleLR, two linear phases (Nystromformer's LRA code): peak/25 -> peak over the
  # warmup, then -> (peak/25)/1e4 at the end. optax divides the *peak* by final_div_factor.
  return optax.linear_onecycle_schedule(
      transition_steps=max(total, 1), peak_value=peak,
      pct_start=min(max(warmup, 1) / max(total, 1), 0.99), pct_final=1.0,
      div_factor=25.0, final_div_factor=25.0 * 1e4)


# PyTorch OneCycleLR cycles momentum by default (cycle_momentum=True): for Adam, beta1 falls from
# max_momentum to base_momentum while the learning rate rises, and climbs back while it decays.
# The LRA runs of Nystromformer / PoNet use those defaults; `optimizer.cycle_momentum` turns it on.
BASE_MOMENTUM, MAX_MOMENTUM = 0.85, 0.95


def one_cycle_b1(warmup: int, total: int) -> optax.Schedule:
  """beta1 mirrored on `_one_cycle`'s learning rate: 0.95 -> 0.85 (at its peak) -> 0.95."""
  total = max(total, 1)
  peak = int(min(max(warmup, 1) / total, 0.99) * total)   # the step optax's one-cycle peaks at
  return optax.join_schedules(
      [optax.linear_schedule(MAX_MOMENTUM, BASE_MOMENTUM, max(peak, 1)),
       optax.linear_schedule(BASE_MOMENTUM, MAX_MOMENTUM, max(total - peak, 1))], [peak])


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


def _updates(config) -> tuple[int, int]:
  """(warmup, total) counted in optimizer updates: micro-batch steps // grad_accum_steps (>= 1,
  validate.py)."""
  accum = int(config.optimizer.grad_accum_steps)
  return config.optimizer.warmup_steps // accum, config.num_train_steps // accum


def make_schedule(config) -> optax.Schedule:
  opt = config.optimizer
  if opt.schedule not in SCHEDULES:
    raise ValueError(f'config.optimizer.schedule={opt.schedule!r}; choose one of {sorted(SCHEDULES)}.')
  return SCHEDULES[opt.schedule](opt.learning_rate, *_updates(config))


def make_optimizer(config) -> optax.GradientTransformation:
  opt = config.optimizer
  chain = []
  if opt.grad_clip_norm > 0:
    chain.append(optax.clip_by_global_norm(opt.grad_clip_norm))
  adamw, b1 = optax.adamw, opt.b1
  if opt.cycle_momentum:
    if opt.schedule != 'one_cycle':
      raise ValueError(f'config.optimizer.cycle_momentum=True needs schedule one_cycle (got '
                       f'{opt.schedule!r}); set cycle_momentum=False or schedule=one_cycle.')
    adamw = optax.inject_hyperparams(optax.adamw, static_args=('mask',))
    b1 = one_cycle_b1(*_updates(config))
  chain.append(adamw(make_schedule(config), b1=b1, b2=opt.b2, eps=opt.eps,
                     weight_decay=opt.weight_decay, mask=weight_decay_mask))
  tx = optax.chain(*chain)
  if opt.grad_accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=int(opt.grad_accum_steps))
  return tx
