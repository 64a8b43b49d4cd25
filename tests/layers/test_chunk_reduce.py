"""Chunk maxima without a [chunks, size] reshape (layers/chunk_reduce.py): values and gradients
equal those of the reshape and `jnp.max` / `jnp.repeat`, ties included (shared evenly)."""
import chex
import jax
import jax.numpy as jnp
import pytest

from poolformers_jax.layers.chunk_reduce import chunk_max, chunk_sum, spread_chunks

BATCH, CHUNKS, DIM = 2, 3, 4


def _by_reshape(x, size, op):
  return op(x.reshape(BATCH, CHUNKS, size, DIM), axis=2)


@pytest.mark.parametrize('ours,op', [(chunk_max, jnp.max), (chunk_sum, jnp.sum)])
@pytest.mark.parametrize('size', [1, 5, 9])   # 9: not a multiple of the 8-row TPU tile
def test_chunk_max_and_sum_equal_the_reshape_with_their_gradients(size, ours, op):
  x = jax.random.normal(jax.random.PRNGKey(0), (BATCH, CHUNKS * size, DIM))
  x = x.at[1, :size].set(2.5)   # a chunk of ties: the gradient is shared among them
  weights = jax.random.normal(jax.random.PRNGKey(1), (BATCH, CHUNKS, DIM))
  chex.assert_trees_all_close(ours(x, size), _by_reshape(x, size, op), atol=1e-6)
  loss = lambda x, f: jnp.sum(jnp.sin(f(x)) * weights)
  chex.assert_trees_all_close(jax.grad(loss)(x, lambda x: ours(x, size)),
                              jax.grad(loss)(x, lambda x: _by_reshape(x, size, op)), atol=1e-6)


def test_spread_equals_repeat_with_its_gradient():
  size = 9
  per_chunk = jax.random.normal(jax.random.PRNGKey(2), (BATCH, CHUNKS, DIM))
  weights = jax.random.normal(jax.random.PRNGKey(3), (BATCH, CHUNKS * size, DIM))
  repeat = lambda p: jnp.repeat(p, size, axis=1)
  chex.assert_trees_all_equal(spread_chunks(per_chunk, size), repeat(per_chunk))
  loss = lambda p, f: jnp.sum(jnp.sin(f(p)) * weights)
  chex.assert_trees_all_close(jax.grad(loss)(per_chunk, lambda p: spread_chunks(p, size)),
                              jax.grad(loss)(per_chunk, repeat), atol=1e-5)
