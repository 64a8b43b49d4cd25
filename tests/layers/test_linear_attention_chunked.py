"""Causal linear attention in chunks (layers/attention.py `chunkwise_causal`) equals the prefix-sum
form it replaced, kept here as the reference: outputs and the gradients of q, k and v, with
padding, both normalizers, lengths that the chunk does and does not divide, and the sequence split
over 1, 4 and 8 shards (LASP-2's gathered states start each shard's chunks)."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import LinearAttention
from poolformers_jax.layers.attention import linear_attention
from poolformers_jax.layers.sequence_parallel import (
  HEAD_TOKENS,
  TOKENS,
  map_shards,
  sharded_sequences,
)
from poolformers_jax.trainer.sharding import make_mesh


def prefix_sum_reference(q, k, v, mask, normalizer, eps=1e-6):
  """The causal form before chunks: [B, H, L, Dh, Dh] states k_j v_j^T summed over j <= i."""
  k = k * mask[:, None, :, None]
  if normalizer == 'padded_length':
    scale = float(q.shape[2]) ** -0.25
    q, k = q * scale, k * scale
  kv = jnp.cumsum(jnp.einsum('bhld,bhle->bhlde', k, v), axis=2)
  num = jnp.einsum('bhld,bhlde->bhle', q, kv)
  if normalizer == 'padded_length':
    return num
  return num / (jnp.einsum('bhld,bhld->bhl', q, jnp.cumsum(k, axis=2))[..., None] + eps)


def qkv_mask(length, batch=2, heads=2, head_dim=8, seed=0):
  """Feature-mapped (positive) q, k and v [B, H, L, Dh]; row 1 padded after 2/3 of the tokens."""
  q, k, v = (jax.random.normal(key, (batch, heads, length, head_dim))
             for key in jax.random.split(jax.random.PRNGKey(seed), 3))
  real = jnp.asarray([length, 2 * length // 3] * (batch // 2))
  return jax.nn.elu(q) + 1, jax.nn.elu(k) + 1, v, jnp.arange(length)[None] < real[:, None]


def values_and_grads(attention, q, k, v, mask):
  """(outputs, d/dq, d/dk, d/dv) of a fixed random projection of the outputs."""
  weights = jax.random.normal(jax.random.PRNGKey(7), q.shape)
  loss = lambda q, k, v: jnp.sum(attention(q, k, v, mask) * weights)
  return (attention(q, k, v, mask), *jax.grad(loss, argnums=(0, 1, 2))(q, k, v))


def assert_equal_to_reference(actual, expected):
  for name, a, e in zip(('outputs', 'grad q', 'grad k', 'grad v'), actual, expected):
    scale = float(jnp.max(jnp.abs(e)))
    T.assert_close('chunked', a, e, atol=1e-5 * scale, rtol=1e-5, what=f'{name}: ')


@pytest.mark.parametrize('normalizer', ['keys', 'padded_length'])
@pytest.mark.parametrize('length,chunk_size', [
    (48, 16),   # three whole chunks
    (45, 16),   # the last chunk padded with 3 zero keys
    (45, 1),    # one token a chunk: the states alone
    (20, 64),   # one chunk of the whole length: the masked product alone
])
def test_chunks_equal_the_prefix_sums(normalizer, length, chunk_size):
  q, k, v, mask = qkv_mask(length)
  chunked = jax.jit(lambda q, k, v, mask: linear_attention(
      q, k, v, mask, True, normalizer=normalizer, chunk_size=chunk_size))
  reference = lambda q, k, v, mask: prefix_sum_reference(q, k, v, mask, normalizer)
  assert_equal_to_reference(values_and_grads(chunked, q, k, v, mask),
                            values_and_grads(reference, q, k, v, mask))


@pytest.mark.parametrize('sequence,chunk_size', [(1, 5), (4, 5), (4, 4), (8, 4)],
                         ids=['1-shard', '4-shards-padded-chunks', '4-shards', '8-shards'])
@pytest.mark.parametrize('normalizer', ['keys', 'padded_length'])
def test_sequence_sharded_chunks_equal_the_whole_prefix_sums(sequence, chunk_size, normalizer):
  """Shards of 12 (4) and 6 (8) tokens; row 1's padding starts inside the third of 4 shards, the
  sixth of 8."""
  mesh = make_mesh(sizes={'sequence': sequence})
  q, k, v, mask = qkv_mask(48)

  def sharded(q, k, v, mask):
    core = lambda shard, q, k, v, mask: HEAD_TOKENS(linear_attention(
        q, k, v, mask, True, normalizer=normalizer, shard=shard, chunk_size=chunk_size))
    with sharded_sequences(mesh):
      return map_shards(core, HEAD_TOKENS(q), HEAD_TOKENS(k), HEAD_TOKENS(v), TOKENS(mask))

  actual = jax.jit(lambda *a: values_and_grads(sharded, *a))(q, k, v, mask)
  reference = lambda q, k, v, mask: prefix_sum_reference(q, k, v, mask, normalizer)
  assert_equal_to_reference(actual, values_and_grads(reference, q, k, v, mask))


def test_the_module_does_not_depend_on_its_chunk_size_and_stays_causal():
  """Outputs and every parameter gradient of LinearAttention at chunks of 1, 5 and 64 tokens
  agree; check_mixer (causality, padding, jit, bfloat16) passes with chunks of 5 on 16 tokens."""
  x, mask = T.random_inputs(0, 2, 13, 16, num_real=[13, 9])
  variables = LinearAttention(2, causal=True).init(jax.random.PRNGKey(0), x, mask)

  def outputs_and_grads(chunk_size):
    module = LinearAttention(2, causal=True, chunk_size=chunk_size)
    loss = lambda variables: jnp.sum(module.apply(variables, x, mask) ** 2)
    return module.apply(variables, x, mask), jax.grad(loss)(variables)

  expected = jax.tree.leaves(outputs_and_grads(64))
  for chunk_size in (1, 5):
    actual = jax.tree.leaves(outputs_and_grads(chunk_size))
    chex.assert_equal(len(actual), len(expected))
    for a, e in zip(actual, expected):   # within 1e-5 of each array's largest magnitude
      T.assert_close('chunk_size', a, e, atol=1e-5 * float(jnp.max(jnp.abs(e))),
                     what=f'chunk_size={chunk_size}: ')
  report = T.check_mixer(LinearAttention(2, causal=True, chunk_size=5))
  assert report['causal'] == 'ok' and report['bfloat16'] == 'ok', report


@pytest.mark.parametrize('chunk_size', [0, -4, 2.5, True, '64'])
def test_a_bad_chunk_size_is_refused_in_one_line(chunk_size):
  x = jnp.zeros((1, 8, 8))
  one_line = (r'^LinearAttention: chunk_size=.* must be a positive int \(tokens per chunk of the '
              r'causal form, e\.g\. 64\)\.(\n|$)')
  with pytest.raises(ValueError, match=one_line):
    LinearAttention(2, causal=True, chunk_size=chunk_size).init(jax.random.PRNGKey(0), x)


def test_memory_grows_with_chunks_not_with_the_square_of_the_head_width():
  """Compiled temporaries of the forward and backward at 2K tokens, head width 32: the chunked
  form holds no [L, Dh, Dh] prefix sums (at least 8 x less than the reference's)."""
  shape = jax.ShapeDtypeStruct((1, 2, 2048, 32), jnp.float32)
  mask = jax.ShapeDtypeStruct((1, 2048), jnp.bool_)

  def temp_bytes(attention):
    loss = lambda q, k, v, mask: jnp.sum(attention(q, k, v, mask))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(shape, shape, shape, mask)
    return compiled.compile().memory_analysis().temp_size_in_bytes

  chunked = temp_bytes(lambda q, k, v, mask: linear_attention(q, k, v, mask, True))
  reference = temp_bytes(lambda q, k, v, mask: prefix_sum_reference(q, k, v, mask, 'keys'))
  prefix_sums = 2 * 2048 * 32 * 32 * 4   # heads x L x Dh x Dh float32
  assert reference >= prefix_sums and chunked * 8 <= reference, (chunked, reference)
  np.testing.assert_array_less(chunked, prefix_sums / 4)
