"""PoNet's SMP in groups of 8 tokens (layers/chunk_tiles.py) against the forms it replaced: the
chunk maxima equal `segment_max_pool` over `chunk_segment_ids` and the [chunks, size] reshape,
bit for bit; the gradient of the maxima is jnp.max's (ties share a chunk's cotangent equally),
bit for bit; the spread back equals jnp.repeat. On one shard and on 8 (tests/conftest.py)."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax.layers import chunk_tiles
from poolformers_jax.layers.common import NEG_INF
from poolformers_jax.layers.ponet import (
  _padding_never_wins,
  chunk_max_pool,
  chunk_segment_ids,
  segment_max_pool,
)
from poolformers_jax.layers.sequence_parallel import TOKENS, Chunks, Shard, map_shards, sharded_sequences
from poolformers_jax.trainer.sharding import make_mesh


def _tied(seed, shape):
  """Whole numbers in [-3, 3]: every chunk has ties at its maximum."""
  return jnp.round(2 * jax.random.normal(jax.random.PRNGKey(seed), shape))


def _mask(length):
  return jnp.arange(length)[None] < jnp.asarray([[length], [2 * length // 3]])


def reshape_reference(x, mask, segment_num):
  """SMP as it was: pad to whole chunks, reshape to [chunks, size], jnp.max, jnp.repeat."""
  length = x.shape[1]
  size = length // segment_num + 1
  total = -(-length // size)
  placed = jnp.pad(_padding_never_wins(x, mask), [(0, 0), (0, total * size - length), (0, 0)],
                   constant_values=NEG_INF)
  top = jnp.max(placed.reshape(x.shape[0], total, size, x.shape[2]), axis=2)
  return jnp.where(mask[..., None], jnp.repeat(top, size, axis=1)[:, :length], 0)


# (length, segment_num): chunks of 23, 129 (groups of 8 and 64) and 1 025 tokens (8, 64, 512) on
# lengths 8 divides, and 16 tokens on a length it does not (61: the reshape form, unchanged).
@pytest.mark.parametrize('length,segment_num,tiled', [
    (200, 9, True), (256, 2, True), (4096, 4, True), (61, 4, False)])
def test_smp_equals_segment_max_and_the_reshape(length, segment_num, tiled):
  size = length // segment_num + 1
  chex.assert_equal(bool(chunk_tiles.group_sizes(length, size)), tiled)
  x, mask = _tied(length, (2, length, 3)), _mask(length)
  pooled = jax.jit(chunk_max_pool, static_argnums=2)(x, mask, segment_num)
  ids = jnp.broadcast_to(chunk_segment_ids(length, segment_num), mask.shape)
  np.testing.assert_array_equal(pooled, jax.jit(segment_max_pool)(x, mask, ids))
  np.testing.assert_array_equal(pooled, reshape_reference(x, mask, segment_num))
  weights = jax.random.normal(jax.random.PRNGKey(1), x.shape)
  grad = lambda smp: jax.jit(jax.grad(lambda x: jnp.sum(weights * smp(x, mask, segment_num))))(x)
  # The maxima's gradient is exact (next test); the spread's sums a chunk's cotangents in
  # another order, so float32 rounding differs.
  np.testing.assert_allclose(grad(chunk_max_pool), grad(reshape_reference), rtol=1e-6, atol=1e-6)


def _chunks(length, size, start):
  """The chunks one shard of `length` tokens falls in, its first token `start` into the first:
  `start` traced as on a mesh (a shared chunk at either end) or the constant 0 (none)."""
  span = -(-(start + length) // size)
  return Chunks(Shard(1, length), size, span, first=0,
                start=jnp.int32(start) if start else 0, span=span)


@pytest.mark.parametrize('length,size,start', [(64, 10, 7), (64, 10, 0), (512, 70, 33),
                                               (128, 8, 3)])
def test_chunk_maxima_and_their_gradient_are_jnp_max_s(length, size, start):
  chunks = _chunks(length, size, start)
  assert chunks._tiled()
  x = _tied(start, (2, length, 4))
  x = x.at[:, :5].set(NEG_INF)   # a chunk may hold padding only
  weights = jax.random.normal(jax.random.PRNGKey(2), (2, chunks.span, 4))
  tiled = lambda x: chunks.max(x, NEG_INF)
  plain = lambda x: chunks.reduce(x, jnp.max, NEG_INF)
  np.testing.assert_array_equal(jax.jit(tiled)(x), plain(x))
  grad = lambda f: jax.jit(jax.grad(lambda x: jnp.sum(weights * f(x))))(x)
  np.testing.assert_array_equal(grad(tiled), grad(plain))
  fractions = np.unique(np.asarray(grad(tiled) / weights.repeat(size, 1)[:, start:start + length]))
  assert len(fractions) > 2, fractions   # ties shared: 1, 1/2, 1/3 ... of a chunk's cotangent


@pytest.mark.parametrize('length,size,start', [(64, 10, 7), (512, 70, 0), (4096, 1025, 500)])
def test_spread_and_chunk_sums_equal_repeat_and_reshape(length, size, start):
  chunks = _chunks(length, size, start)
  per_chunk = jax.random.normal(jax.random.PRNGKey(3), (2, chunks.span, 3))
  repeated = jnp.repeat(per_chunk, size, axis=1)[:, start:start + length]
  np.testing.assert_array_equal(chunks.spread(per_chunk), repeated)
  x = jax.random.normal(jax.random.PRNGKey(4), (2, length, 3))
  sums = chunk_tiles.tiled_reduce(x, chunks.start, size, chunks.span, 'sum', 0)
  np.testing.assert_allclose(sums, chunks.reduce(x, jnp.sum, 0), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize('length,segment_num', [(256, 16), (1024, 13)])
def test_smp_on_8_shards_equals_the_whole(length, segment_num):
  """Shards of 32 (128) tokens, chunks of 17 (79): every shard boundary cuts a chunk."""
  x, mask = _tied(7, (2, length, 3)), _mask(length)

  def sharded(x):
    with sharded_sequences(make_mesh(8, {'sequence': 8})):
      return map_shards(lambda shard, x, mask: TOKENS(chunk_max_pool(x, mask, segment_num, shard)),
                        TOKENS(x), TOKENS(mask))

  np.testing.assert_array_equal(jax.jit(sharded)(x), reshape_reference(x, mask, segment_num))
  # Without ties: with them, each shard's part of a chunk first gets an equal share (Chunks.join).
  untied = jax.random.normal(jax.random.PRNGKey(6), x.shape)
  weights = jax.random.normal(jax.random.PRNGKey(5), x.shape)
  grad = lambda smp: jax.jit(jax.grad(lambda x: jnp.sum(weights * smp(x))))(untied)
  whole = lambda x: reshape_reference(x, mask, segment_num)
  np.testing.assert_allclose(grad(sharded), grad(whole), rtol=1e-6, atol=1e-6)
