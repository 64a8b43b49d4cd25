"""PoNet's SMP by running maxima along the tokens (layers/chunk_scan.py) against the forms it
replaced: every token's chunk maximum equals `segment_max_pool` over `chunk_segment_ids` and the
[chunks, size] reshape with jnp.repeat, bit for bit, and so does the gradient where a chunk's
cotangents sum exactly (whole numbers): jnp.max's rule, ties sharing a chunk's cotangent
equally. On one shard and on 8 (tests/conftest.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax.layers.chunk_scan import SCAN_FROM
from poolformers_jax.layers.common import NEG_INF
from poolformers_jax.layers.ponet import (
  _padding_never_wins,
  chunk_max_pool,
  chunk_segment_ids,
  segment_max_pool,
)
from poolformers_jax.layers.sequence_parallel import (
  TOKENS,
  Chunks,
  Shard,
  map_shards,
  sharded_sequences,
)
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


# (length, segment_num): chunks of 23, 129, 1 025 (the LRA Text segments at 4M tokens) and 16
# tokens, scanned; of 4 097 (16M), scanned by default (Chunks.max_everywhere). The last chunk
# shorter (padded) in each.
@pytest.mark.parametrize('length,segment_num,scan', [
    (200, 9, True), (256, 2, True), (4096, 4, True), (61, 4, True), (8192, 2, None)])
def test_smp_equals_segment_max_and_the_reshape(length, segment_num, scan):
  x, mask = _tied(length, (2, length, 3)), _mask(length)
  smp = lambda x, mask, segment_num: chunk_max_pool(x, mask, segment_num, scan=scan)
  pooled = jax.jit(smp, static_argnums=2)(x, mask, segment_num)
  program = str(jax.make_jaxpr(smp, static_argnums=2)(x, mask, segment_num))
  assert ('custom_vjp_call' in program) == (scan or length // segment_num + 1 >= SCAN_FROM)
  ids = jnp.broadcast_to(chunk_segment_ids(length, segment_num), mask.shape)
  np.testing.assert_array_equal(pooled, jax.jit(segment_max_pool)(x, mask, ids))
  np.testing.assert_array_equal(pooled, reshape_reference(x, mask, segment_num))
  weights = jax.random.normal(jax.random.PRNGKey(1), x.shape)
  grad = lambda smp: jax.jit(jax.grad(lambda x: jnp.sum(weights * smp(x, mask, segment_num))))(x)
  # A chunk's cotangents are summed in another order: float32 rounding differs (next test).
  np.testing.assert_allclose(grad(smp), grad(reshape_reference), rtol=1e-5, atol=1e-5)


def _chunks(length, size, start):
  """The chunks one shard of `length` tokens falls in, its first token `start` into the first:
  `start` traced as on a mesh (a shared chunk at either end) or the constant 0 (none)."""
  span = -(-(start + length) // size)
  return Chunks(Shard(1, length), size, span, first=0,
                start=jnp.int32(start) if start else 0, span=span)


def _whole_numbers(seed, shape):
  """Cotangents whose sums are exact in any order."""
  return jnp.round(3 * jax.random.normal(jax.random.PRNGKey(seed), shape))


@pytest.mark.parametrize('length,size,start', [(64, 10, 7), (64, 10, 0), (512, 70, 33),
                                               (128, 8, 3), (40, 64, 30)])
def test_chunk_maxima_and_their_gradient_are_the_reshape_s(length, size, start):
  """Tied values, a chunk of padding only (its fill counted among the ties, as jnp.max on the
  padded reshape counts it), a shard inside one chunk boundary (40 tokens, chunks of 64)."""
  chunks = _chunks(length, size, start)
  x = _tied(start, (2, length, 4)).at[:, :5].set(NEG_INF)
  weights = _whole_numbers(2, x.shape)
  scan = lambda x: chunks.max_everywhere(x, NEG_INF, scan=True)
  reshape = lambda x: chunks.spread(chunks.join(chunks.reduce(x, jnp.max, NEG_INF), jnp.max,
                                                NEG_INF))
  np.testing.assert_array_equal(jax.jit(scan)(x), reshape(x))
  grad = lambda f: jax.jit(jax.grad(lambda x: jnp.sum(weights * f(x))))(x)
  np.testing.assert_array_equal(grad(scan), grad(reshape))
  shares = np.unique(np.asarray(grad(scan)) % 1)
  assert len(shares) > 2, shares   # ties share: halves, thirds ... of a chunk's cotangent


@pytest.mark.parametrize('length,segment_num', [(256, 16), (1024, 13)])
def test_smp_on_8_shards_equals_the_whole(length, segment_num):
  """Shards of 32 (128) tokens, chunks of 17 (79): every shard boundary cuts a chunk."""
  x, mask = _tied(7, (2, length, 3)), _mask(length)

  def sharded(x):
    with sharded_sequences(make_mesh(8, {'sequence': 8})):
      return map_shards(lambda shard, x, mask: TOKENS(chunk_max_pool(
          x, mask, segment_num, shard, scan=True)),
                        TOKENS(x), TOKENS(mask))

  np.testing.assert_array_equal(jax.jit(sharded)(x), reshape_reference(x, mask, segment_num))
  # Without ties: with them, each shard's part of a chunk first gets an equal share (Chunks.join).
  untied = jax.random.normal(jax.random.PRNGKey(6), x.shape)
  weights = _whole_numbers(5, x.shape)
  grad = lambda smp: jax.jit(jax.grad(lambda x: jnp.sum(weights * smp(x))))(untied)
  whole = lambda x: reshape_reference(x, mask, segment_num)
  np.testing.assert_array_equal(grad(sharded), grad(whole))
