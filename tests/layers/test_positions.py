"""Positions (layers/common.py): the sinusoids against Vaswani et al.'s formula in float64, rotary
against RoFormer's rotation matrix and its relative-position property, the kit on every mixer
that takes rotary, and the one-line refusal of the others."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import MultiHeadAttention, build_mixer
from poolformers_jax.layers.common import apply_rotary, sinusoidal_positions
from poolformers_jax.layers.registry import rotary_mixers


def test_sinusoidal_positions_are_vaswani_et_al_in_float64():
  positions, dim = np.array([0, 1, 7, 300, 2047]), 10
  expected = np.zeros((5, dim))
  for i in range(dim // 2):   # PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...)
    expected[:, 2 * i] = np.sin(positions / 10000.0 ** (2 * i / dim))
    expected[:, 2 * i + 1] = np.cos(positions / 10000.0 ** (2 * i / dim))
  got = sinusoidal_positions(jnp.asarray(positions), dim)
  chex.assert_trees_all_close(np.asarray(got, np.float64), expected, atol=2e-4)   # float32 angles


def test_rotary_turns_each_pair_by_position_times_its_frequency():
  """RoFormer Eq. 34 with its rotation matrices written out in float64, head by head."""
  heads, head_dim, length = 2, 6, 5
  x = np.random.default_rng(0).normal(size=(1, length, heads * head_dim))
  expected = np.empty_like(x)
  for h in range(heads):
    for m in range(length):
      for i in range(head_dim // 2):
        angle = m * 10000.0 ** (-2 * i / head_dim)
        rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        j = h * head_dim + 2 * i
        expected[0, m, j:j + 2] = rotation @ x[0, m, j:j + 2]
  got = apply_rotary(jnp.asarray(x, jnp.float32), heads)
  chex.assert_trees_all_close(np.asarray(got, np.float64), expected, atol=1e-5)


def test_rotary_scores_depend_only_on_relative_positions():
  """q_m . k_n after rotation is the same when every position moves by the same shift (Eq. 16),
  and changes when only the queries move."""
  heads, length = 2, 7
  rng = np.random.default_rng(1)
  q, k = (jnp.asarray(rng.normal(size=(2, length, 16)), jnp.float32) for _ in range(2))

  def scores(q_pos, k_pos):
    qr = apply_rotary(q, heads, jnp.asarray(q_pos)).reshape(2, length, heads, -1)
    kr = apply_rotary(k, heads, jnp.asarray(k_pos)).reshape(2, length, heads, -1)
    return jnp.einsum('bqhd,bkhd->bhqk', qr, kr)

  base = scores(np.arange(length), np.arange(length))
  shifted = scores(np.arange(length) + 113, np.arange(length) + 113)
  chex.assert_trees_all_close(shifted, base, atol=2e-4, rtol=1e-4)
  assert float(jnp.abs(scores(np.arange(length) + 3, np.arange(length)) - base).max()) > 1e-2


def test_rotary_refuses_an_odd_head_dim_in_one_line():
  with pytest.raises(ValueError, match=r'^rotary positions turn feature pairs: head dim 6 / 2 '
                                       r'heads = 3 is odd; .*\.$'):
    apply_rotary(jnp.ones((1, 4, 6)), 2)


def test_the_mixers_that_take_rotary_are_the_attention_family():
  assert rotary_mixers() == ['contextpool', 'softmax']


@pytest.mark.parametrize('name', rotary_mixers())
@pytest.mark.parametrize('causal', [False, True])
def test_every_rotary_mixer_passes_the_kit(name, causal):
  mixer = build_mixer(name, shared=dict(num_heads=2, causal=causal, rotary=True))
  report = T.check_mixer(mixer)
  skipped = {p for p, result in report.items() if result.startswith('skipped')}
  assert skipped == set(T.not_by_design(mixer)) | (set() if causal else {'causal'}), report
  x, mask = T.random_inputs(0, 2, 16, 16, [16, 11])   # and the rotation is really applied
  variables = mixer.init(jax.random.PRNGKey(0), x, mask)
  plain = mixer.clone(rotary=False).apply(variables, x, mask)
  assert float(jnp.abs(mixer.apply(variables, x, mask) - plain).max()) > 1e-3


def test_rotary_attention_is_the_same_function_in_every_implementation():
  x, mask = T.random_inputs(2, 2, 12, 16, [12, 7])
  explicit = MultiHeadAttention(2, causal=True, rotary=True)
  variables = explicit.init(jax.random.PRNGKey(0), x, mask)
  fused = explicit.clone(implementation='xla').apply(variables, x, mask)
  chex.assert_trees_all_close(fused, explicit.apply(variables, x, mask), atol=1e-5)


@pytest.mark.parametrize('name', ['ponet', 'linear', 'adamra', 'msac'])
def test_a_mixer_without_rotary_is_refused_in_one_line(name):
  with pytest.raises(ValueError, match=rf"^mixer '{name}' \(\w+\) takes no rotary positions; use "
                                       r".*one of the mixers that take it: \['contextpool', "
                                       r"'softmax'\]\.$"):
    build_mixer(name, shared=dict(num_heads=2, rotary=True), **(
        {'segment_num': 4} if name == 'ponet' else {}))
