"""`fit`: the few lines that train a small model in a notebook: Adam on `loss_fn(params, *batch)`,
one jitted step, one device. The papers' experiments use the trainer (`train_and_evaluate`)."""
from __future__ import annotations

from typing import Any, Callable

import jax
import optax


def fit(loss_fn: Callable[..., jax.Array], params: Any, next_batch: Callable[[], tuple], *,
        steps: int, learning_rate: float = 3e-3) -> tuple[Any, list[float]]:
  """`steps` Adam updates of `params`, each on the batch `next_batch()` returns (the arguments
  of `loss_fn` after the params). Returns (the trained params, the loss of every step)."""
  tx = optax.adam(learning_rate)

  @jax.jit
  def step(params, opt_state, *batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state, losses = tx.init(params), []
  for _ in range(steps):
    params, opt_state, loss = step(params, opt_state, *next_batch())
    losses.append(float(loss))
  return params, losses
