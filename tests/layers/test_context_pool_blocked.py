"""ContextPool evaluated query_block queries at a time equals the [L, L] form (values, grads)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import ContextPool, ContextPoolAttention

B, L, D = 2, 11, 16   # 11 = 3 blocks of 4 with one padded query row


def _value_and_grads(module, variables, x, mask):
  loss = lambda v, xx: jnp.sum(jnp.where(mask[..., None], module.apply(v, xx, mask), 0) ** 2)
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(variables, x)


@pytest.mark.parametrize('causal', [False, True])
def test_blocked_equals_dense_values_and_grads(causal):
  x, mask = T.random_inputs(0, B, L, D, num_real=[L, 7])
  dense, blocked = ContextPool(causal=causal, query_block=None), ContextPool(causal=causal,
                                                                              query_block=4)
  variables = jax.jit(dense.init)(jax.random.PRNGKey(0), x, mask)
  (y_dense, state_dense), (y_blocked, state_blocked) = (
      jax.jit(lambda v, xx, m=m: m.apply(v, xx, mask, mutable=['intermediates']))(variables, x)
      for m in (dense, blocked))
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y_blocked)[m], np.asarray(y_dense)[m], atol=1e-5)
  for a, b in zip(jax.tree.leaves(state_dense), jax.tree.leaves(state_blocked)):  # w and sigma
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
  (l1, (gp1, gx1)), (l2, (gp2, gx2)) = (_value_and_grads(mod, variables, x, mask)
                                        for mod in (dense, blocked))
  np.testing.assert_allclose(float(l1), float(l2), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(gx1), np.asarray(gx2), atol=1e-5)
  for a, b in zip(jax.tree.leaves(gp1), jax.tree.leaves(gp2)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('variant', [dict(weights='nonlocal', locality='fixed_window'),
                                     dict(locality='random_sparse', causal=True)],
                         ids=['nonlocal-fixed_window', 'random_sparse-causal'])
def test_blocked_equals_dense_for_ablations(variant):
  # Every variant's logits are row-local, so blocks change nothing (nonlocal also sows its
  # [B, L, L] weights, stitched from the blocks). Default-variant padding: test above.
  x, mask = T.random_inputs(1, B, L, D, num_real=[L, 7])
  dense = ContextPool(query_block=None, **variant)
  variables = jax.jit(dense.init)(jax.random.PRNGKey(0), x, mask)
  outs = [jax.jit(lambda v, xx, m=m: m.apply(v, xx, mask, mutable=['intermediates']))(
      variables, x) for m in (dense, ContextPool(query_block=3, **variant))]
  mk = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(outs[1][0])[mk], np.asarray(outs[0][0])[mk], atol=1e-5)
  for a, b in zip(jax.tree.leaves(outs[0][1]), jax.tree.leaves(outs[1][1])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_blocked_is_the_default_and_padding_invariant():
  # The default block (256) at L = 300: two blocks; padding values and amount are irrelevant.
  assert ContextPool().query_block == ContextPoolAttention(num_heads=2).query_block == 256
  x, mask = T.random_inputs(2, 1, 300, 8, num_real=[290])
  module = ContextPool()
  variables = jax.jit(module.init)(jax.random.PRNGKey(0), x, mask)
  noisy = jnp.where(mask[..., None], x, 7.0)
  y, y_noisy = (jax.jit(module.apply)(variables, xx, mask) for xx in (x, noisy))
  y_dense = jax.jit(ContextPool(query_block=None).apply)(variables, x, mask)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y)[m], np.asarray(y_dense)[m], atol=1e-5)
  np.testing.assert_allclose(np.asarray(y_noisy)[m], np.asarray(y)[m], atol=1e-5)
  with pytest.raises(ValueError, match='query_block=0 must be >= 1'):
    ContextPool(query_block=0).init(jax.random.PRNGKey(0), x, mask)
