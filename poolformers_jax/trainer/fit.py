"""The notebooks' small-model loop (not the papers' trainer, `train_and_evaluate`): `fit` trains
`loss_fn(params, *batch)` with Adam, a jitted step on one device, through the trainer's
TrainState (`state.apply_gradients`, as trainer/step.py)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from poolformers_jax.trainer.setup import TrainState


def fit(loss_fn: Callable[..., jax.Array], params: Any, next_batch: Callable[[], tuple], *,
        steps: int, learning_rate: float = 3e-3) -> tuple[Any, list[float]]:
  """`steps` Adam updates of `params`, each on the batch `next_batch()` returns (the arguments
  of `loss_fn` after the params). Returns (the trained params, the loss of every step)."""

  @jax.jit
  def step(state, *batch):
    loss, grads = jax.value_and_grad(loss_fn)(state.params, *batch)
    return state.apply_gradients(grads=grads), loss

  state = TrainState.create(apply_fn=None, params=params, tx=optax.adam(learning_rate))
  losses = []
  for _ in range(steps):
    state, loss = step(state, *next_batch())
    losses.append(float(loss))
  return state.params, losses
