"""Sequence parallelism of the baselines (layers/attention.py): linear and softmax attention split
over 4 devices along the tokens equal the unsplit mixers (outputs, loss, every gradient); linear
attention moves only length-independent states, softmax (the quadratic baseline) gathers K / V,
which grow with the length. 8 fake CPU devices (tests/conftest.py): 4 sequence x 2 data."""
import chex
import jax
import jax.numpy as jnp
import pytest

from poolformers_jax.layers.attention import LinearAttention, MultiHeadAttention
from poolformers_jax.layers.sequence_parallel import sharded_sequences
from poolformers_jax.testing import assert_sequence_parallel
from poolformers_jax.trainer.sharding import make_mesh

# use_bias=False: softmax is blind to the key bias (it adds the same q . b to a whole row of
# scores), so that gradient is rounding noise, which no relative tolerance can compare.
SEGMENTS = (jnp.arange(48)[None, :] >= jnp.asarray([20, 5, 30, 13])[:, None]).astype(jnp.int32)


@pytest.mark.parametrize('mixer,call_kwargs', [
    # the reference normaliser: the padded length of the whole sequence, not of a shard
    (LinearAttention(2, causal=True, normalizer='padded_length'), {}),
    (MultiHeadAttention(2, causal=True, use_bias=False), {}),
    # the fused kernel, causal at the queries' global positions, packed rows whose sentences
    # cross the shard boundaries (12, 24, 36)
    (MultiHeadAttention(2, causal=True, use_bias=False, implementation='xla'),
     {'segment_ids': SEGMENTS}),
], ids=['linear-causal-padded_length', 'softmax-causal', 'softmax-causal-xla-segments'])
def test_attention_split_over_the_sequence_equals_the_whole(mixer, call_kwargs):
  found = assert_sequence_parallel(mixer, sequence=4, length=48, call_kwargs=call_kwargs)
  chex.assert_equal(any(op == 'all-gather' for op, _ in found), True)   # devices talk


@pytest.mark.parametrize('causal', [False, True], ids=['bidirectional', 'causal'])
def test_linear_attention_moves_nothing_that_grows_with_the_length(causal):
  """Split equals whole at 48 and 96 tokens, and the compiled collectives (op and shape) are the
  same at both: the [B, H, Dh, Dh] / [B, H, Dh] states all-reduced, causal the per-shard states
  [count, B, H, Dh, Dh + 1] gathered (LASP-2), the parameter gradients over the batch."""
  mixer = LinearAttention(2, causal=causal)
  short = assert_sequence_parallel(mixer, sequence=4, length=48)
  long = assert_sequence_parallel(mixer, sequence=4, length=96)
  assert sorted(short) == sorted(long), (short, long)
  state = ('all-gather', (4, 2, 2, 8, 9)) if causal else ('all-reduce', (2, 2, 8, 8))
  assert state in short, short   # 2 rows per data shard, 2 heads of 8


def test_softmax_attention_gathers_keys_and_values_that_grow_with_the_length():
  """The quadratic baseline: split equals whole, and every shard gathers all keys and values
  [count, B, L / count, D] and the key mask [count, B, L / count]: twice as large at 96 tokens."""
  mixer = MultiHeadAttention(2, use_bias=False)
  gathered = {}
  for length in (48, 96):
    found = assert_sequence_parallel(mixer, sequence=4, length=length)
    gathered[length] = sorted({shape for op, shape in found if op == 'all-gather'})
  assert gathered == {48: [(4, 2, 12), (4, 2, 12, 16)], 96: [(4, 2, 24), (4, 2, 24, 16)]}, gathered


def test_dropout_on_the_weights_is_refused_sequence_sharded_in_one_line():
  mixer = MultiHeadAttention(2, dropout_rate=0.1, dropout_on='weights')
  x = jnp.zeros((2, 8, 8))
  variables = mixer.init(jax.random.PRNGKey(0), x)
  with sharded_sequences(make_mesh(2, {'sequence': 2})):
    with pytest.raises(ValueError, match=r"dropout_on='weights' cannot run sequence-sharded"):
      jax.eval_shape(lambda v: mixer.apply(v, x, deterministic=False,
                                           rngs={'dropout': jax.random.PRNGKey(1)}), variables)
    jax.eval_shape(lambda v: mixer.apply(v, x), variables)   # evaluation (no dropout) runs
