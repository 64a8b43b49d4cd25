"""Sequence parallelism (layers/sequence_parallel.py): a mixer split over devices along the tokens
equals the unsplit mixer (values and gradients), and what crosses devices does not grow with the
length. 8 fake CPU devices (tests/conftest.py)."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax.layers import AdaMRA, LinearAttention, PoNet, build_mixer
from poolformers_jax.layers.sequence_parallel import (
  PER_EXAMPLE,
  TOKENS,
  map_shards,
  sharded_sequences,
)
from poolformers_jax.testing import assert_sequence_parallel
from poolformers_jax.trainer.sharding import make_mesh


# Chunks crossing every shard boundary (13 tokens against shards of 12) are the next test's.
@pytest.mark.parametrize('segment_num,window,sequence', [
    (1, 5, 8),    # one chunk over all 8 shards (a global max), a halo of 2
    (23, 3, 4),   # chunks of 3 tokens, which divide the shards of 12: none is shared
])
def test_ponet_split_over_the_sequence_equals_the_whole(segment_num, window, sequence):
  mixer = PoNet(num_heads=2, segment_num=segment_num, local_window=window)
  found = assert_sequence_parallel(mixer, sequence=sequence, length=48)
  chex.assert_equal(bool(found), True)   # the split is real: devices talk
  if 48 // sequence % (48 // segment_num + 1) == 0:   # no end chunks to gather
    chex.assert_equal([c for c in found if c[0] == 'all-gather'], [])


@pytest.mark.parametrize('mixer', [
    PoNet(num_heads=2, segment_num=5), PoNet(num_heads=2, segment_num=1),
    AdaMRA(num_heads=2, compression_rates=(1 / 7, 1 / 16, 1 / 48)),
    AdaMRA(num_heads=2, routing='none'), LinearAttention(num_heads=2, causal=True),
], ids=['ponet', 'ponet-one-chunk', 'adamra', 'adamra-every-head', 'linear-causal'])
def test_one_shard_is_the_plain_program(mixer):
  """Unsharded, a core runs as one shard whose offset is the constant 0: the chunk placement is
  static (a pad and a slice, no dynamic slice) and no collective is left, so the one code path
  costs nothing without a mesh (benchmarks/ponet_step.py times PoNet's step)."""
  x, mask = jnp.ones((2, 48, 16)), jnp.arange(48)[None] < jnp.asarray([48, 30])[:, None]
  variables = mixer.init(jax.random.PRNGKey(0), x, mask)
  grad = jax.grad(lambda v, x: jnp.sum(mixer.apply(v, x, mask) ** 2), argnums=(0, 1))
  program = jax.jit(grad).lower(variables, x).as_text()
  for op in ('dynamic_slice', 'dynamic_update_slice', 'all_gather', 'all_reduce',
             'collective_permute', 'shard_map', 'axis_index'):
    assert f'{op}' not in program, op


def test_ponet_moves_nothing_that_grows_with_the_length():
  """The compiled program's collectives (op and shape) are the same at 48 and 96 tokens: GA's
  partial sums, SMP's end-chunk maxima and LMP's halos; no gathered sequence."""
  mixer = PoNet(num_heads=2, segment_num=4, local_window=3)
  short = assert_sequence_parallel(mixer, sequence=4, length=48)
  long = assert_sequence_parallel(mixer, sequence=4, length=96)
  assert sorted(short) == sorted(long), (short, long)
  assert {op for op, _ in short} <= {'all-reduce', 'all-gather', 'collective-permute',
                                     'reduce-scatter'}


def test_halo_and_collectives_are_those_of_the_whole_sequence():
  """map_shards on 4 shards: the halo is the neighbours' tokens (fill at the ends), psum the
  total, offset the global position."""
  mesh = make_mesh(4, {'sequence': 4})
  x = jnp.arange(2 * 16, dtype=jnp.float32).reshape(2, 16, 1)

  def core(shard, x):
    window = shard.halo(x, 2, 1, fill=-1.0)                  # [B, 2 + 4 + 1, 1]
    total = shard.psum(jnp.sum(x, axis=1))                   # [B, 1]
    position = jnp.broadcast_to(shard.positions()[None, :, None], x.shape).astype(x.dtype)
    return TOKENS(window[:, :shard.length] + window[:, 3:]), PER_EXAMPLE(total), TOKENS(position)

  def run(x):
    with sharded_sequences(mesh):
      return map_shards(core, TOKENS(x))

  pairs, total, position = jax.jit(run)(x)
  padded = np.pad(np.asarray(x), ((0, 0), (2, 1), (0, 0)), constant_values=-1.0)
  # each shard's window starts 2 before it: out[t] = x[t - 2] + x[t + 1] (per shard of 4)
  chex.assert_trees_all_close(pairs, padded[:, :16] + padded[:, 3:19])
  chex.assert_trees_all_close(total, np.sum(np.asarray(x), axis=1))
  chex.assert_trees_all_equal(position[0, :, 0], np.arange(16, dtype=np.float32))


def test_a_mixer_without_a_sequence_parallel_form_is_refused_naming_those_with_one():
  mesh = make_mesh(2, {'sequence': 2})
  with sharded_sequences(mesh):
    with pytest.raises(ValueError, match=r"no sequence-parallel form.*'ponet'"):
      build_mixer('sac', num_heads=2)
  build_mixer('sac', num_heads=2)   # without sequence sharding: built as always


def test_a_length_the_shards_do_not_divide_is_refused_in_one_line():
  mesh = make_mesh(4, {'sequence': 4})
  x = jnp.zeros((1, 10, 8))
  mixer = PoNet(num_heads=2, segment_num=2)
  variables = mixer.init(jax.random.PRNGKey(0), x)
  with sharded_sequences(mesh):
    with pytest.raises(ValueError, match='10 tokens do not split over 4 sequence shards'):
      jax.eval_shape(lambda v: mixer.apply(v, x), variables)
