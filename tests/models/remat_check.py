"""What the test files of the models share about `remat` (models/block.py's REMAT_POLICIES): a
model built with and without it, compared on the parameters, a loss and every gradient."""
import chex
import jax
import jax.numpy as jnp

# Rematerialised blocks recompute their forward inside the backward pass as a separate program,
# which XLA fuses and sums in another order: float32 round-off, not bit-equality (observed
# differences ~4e-6 on losses of order 10).
TOLERANCE = dict(atol=2e-5, rtol=2e-5)


def assert_remat_changes_nothing(build, inputs, remat: str, tolerance=None) -> None:
  """`build(remat)` -> an unbound model of `inputs` whose outputs are float logits. Its parameter
  tree (names, shapes, initial values) is the same with `remat` and without; with dropout on,
  the loss (a fixed random projection of the logits) and every gradient agree to `tolerance`
  (default TOLERANCE)."""
  tolerance = tolerance or TOLERANCE
  plain, rematerialised = build('none'), build(remat)
  params = jax.jit(plain.init)(jax.random.PRNGKey(0), inputs)['params']
  chex.assert_trees_all_equal(
      jax.jit(rematerialised.init)(jax.random.PRNGKey(0), inputs)['params'], params)

  def loss(model, params):
    logits = model.apply({'params': params}, inputs, deterministic=False,
                         rngs={'dropout': jax.random.PRNGKey(1)})
    weights = jax.random.normal(jax.random.PRNGKey(2), logits.shape)
    return jnp.mean(logits * weights)

  value, grads = jax.jit(jax.value_and_grad(lambda p: loss(plain, p)))(params)
  value_r, grads_r = jax.jit(jax.value_and_grad(lambda p: loss(rematerialised, p)))(params)
  chex.assert_trees_all_close(value_r, value, **tolerance)
  chex.assert_trees_all_close(grads_r, grads, **tolerance)
  assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads))   # not vacuous
