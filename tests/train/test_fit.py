"""trainer/fit.py, the notebooks' training loop: the same parameters and losses as Adam written
out."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from poolformers_jax.trainer.fit import fit


def test_fit_is_adam_on_the_loss_step_by_step():
  rng = np.random.default_rng(0)
  w_true = rng.normal(size=(3,)).astype(np.float32)
  batches = [(x, x @ w_true) for x in rng.normal(size=(20, 8, 3)).astype(np.float32)]
  loss_fn = lambda params, x, y: jnp.mean((x @ params['w'] + params['b'] - y) ** 2)
  start = {'w': jnp.zeros(3), 'b': jnp.zeros(())}
  stream = iter(batches)
  # One trace for the 20 steps: the jitted step does not retrace (chex counts the loss's traces).
  traced_once = chex.assert_max_traces(lambda *args: loss_fn(*args), n=1)
  params, losses = fit(traced_once, start, lambda: next(stream), steps=20, learning_rate=0.05)
  tx, expected, expected_losses = optax.adam(0.05), start, []
  opt_state = tx.init(expected)
  for x, y in batches:
    loss, grads = jax.value_and_grad(loss_fn)(expected, x, y)
    updates, opt_state = tx.update(grads, opt_state, expected)
    expected, expected_losses = optax.apply_updates(expected, updates), expected_losses + [loss]
  # The same steps, jitted against eager: equal to float32 rounding.
  np.testing.assert_allclose(losses, expected_losses, rtol=1e-5, atol=1e-7)
  chex.assert_trees_all_close(params, expected, rtol=1e-5, atol=1e-6)
  assert np.mean(losses[-5:]) < 0.2 * np.mean(losses[:5])   # it trains
