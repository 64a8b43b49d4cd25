"""poolformers_jax.testing: check_mixer passes every registered mixer (a user's too) and catches
each planted bug, naming its property on the first line; MixerTestCase under chex.variants;
the tests' retrace guards (tests/retrace.py) on a Flax apply and a jitted function."""
import re
import unittest

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import retrace

from poolformers_jax import testing as T
from poolformers_jax.layers import (
  MIXERS,
  MixerTraits,
  MultiHeadAttention,
  build_mixer,
  register_mixer,
)
from poolformers_jax.layers.registry import mixer_fields

# Options that let every built-in mixer run at the kit's length 16.
SMALL = {'ponet': dict(segment_num=4), 'adamra': dict(compression_rates=(1 / 2, 1 / 4, 1 / 8)),
         'msac': dict(windows=(1, 3)), 'sac': dict(window=3)}


def _registered_cases():
  """(name, causal) for every registered mixer, and its causal form where it has one; read at
  collection, so a mixer registered before (a conftest, an imported plugin) is included."""
  return [pytest.param(name, causal, id=f'{name}-causal' if causal else name)
          for name in sorted(MIXERS)
          for causal in (False, True) if not causal or 'causal' in mixer_fields(MIXERS[name])]


@pytest.mark.parametrize('name,causal', _registered_cases())
def test_every_registered_mixer_passes_check_mixer(name, causal):
  mixer = build_mixer(name, shared=dict(num_heads=2, causal=causal), **SMALL.get(name, {}))
  report = T.check_mixer(mixer)
  skipped = {p for p, result in report.items() if result.startswith('skipped')}
  # Only what the registry entry declares, causality for a bidirectional mixer and dropout for a
  # mixer without a dropout field (PoNet, linear attention) are skipped.
  undeclared = (set() if causal else {'causal'}) | (
      set() if any('dropout' in f for f in mixer_fields(type(mixer))) else {'dropout'})
  assert skipped == set(T.not_by_design(mixer)) | undeclared, report
  assert all(result == 'ok' for p, result in report.items() if p not in skipped), report


class _Planted(nn.Module):
  """Softmax attention, correct with bug='none'; each other `bug` breaks one property."""
  bug: str = 'none'
  causal: bool = False
  dropout_rate: float = 0.0
  dtype: object = None

  @nn.compact
  def __call__(self, x, mask=None, *, deterministic=True):
    y = MultiHeadAttention(2, causal=self.causal, dropout_rate=self.dropout_rate,
                           dtype=self.dtype)(x, mask, deterministic=deterministic)
    real = x if mask is None else jnp.where(mask[..., None], x, 0)
    if self.bug == 'padding_leak':       # the mean counts padded tokens
      y = y + 0.1 * jnp.mean(x, axis=1, keepdims=True)
    elif self.bug == 'peek_ahead':       # token t sees real token t + 1
      y = y + 0.1 * jnp.pad(real[:, 1:], ((0, 0), (0, 1), (0, 0)))
    elif self.bug == 'nan_grad':         # adds 0 forward; backward 0 * inf = NaN
      y = y + jnp.sqrt(jnp.abs(x) * 0.0)
    elif self.bug == 'batch_mixing':     # a batch statistic
      y = y + 0.1 * jnp.mean(real, axis=0, keepdims=True)
    elif self.bug == 'jit_differs':      # a Python branch on being traced
      y = y + (0.01 if isinstance(x, jax.core.Tracer) else 0.0)
    elif self.bug == 'dropout_rng':      # a fresh key per call instead of the 'dropout' stream
      keep = jax.random.bernoulli(jax.random.PRNGKey(np.random.randint(1 << 30)), 0.9, y.shape)
      y = y if deterministic else jnp.where(keep, y, 0)
    return y


@pytest.mark.parametrize('bug,causal,prop', [
    ('padding_leak', False, 'padding_values'),
    ('peek_ahead', True, 'causal'),
    ('nan_grad', False, 'grads'),
    ('batch_mixing', False, 'batch_rows'),
    ('jit_differs', False, 'jit'),
    ('dropout_rng', False, 'dropout'),
])
def test_check_mixer_catches_each_planted_bug_and_names_it_first(bug, causal, prop):
  with pytest.raises(AssertionError) as caught:
    T.check_mixer(_Planted(bug, causal=causal))
  first = str(caught.value).splitlines()[0]
  assert first.startswith(f'{prop}: '), str(caught.value)
  assert caught.value.property == prop and caught.value.failed[0] == prop
  if prop not in ('dropout',):   # the worst offending position is named
    assert ('batch ' in first and 'position ' in first) or 'parameter ' in first, first


def test_the_unbroken_planted_mixer_passes_every_property():
  """Control for the test above: the same wrapper without a bug, causal or not."""
  for causal in (False, True):
    report = T.check_mixer(_Planted('none', causal=causal))
    assert all(r == 'ok' for r in report.values()) if causal else report['causal'].startswith(
        'skipped'), report


def test_a_user_registered_mixer_is_picked_up_and_its_declared_skips_named():
  class Leaky(_Planted):
    traits = MixerTraits(not_by_design={'padding_values': 'made up for this test'})

  register_mixer('kit_test_leaky')(Leaky)
  try:
    assert 'kit_test_leaky' in MIXERS
    report = T.check_mixer(build_mixer('kit_test_leaky'))
    assert report['padding_values'] == 'skipped: made up for this test', report
    # The leak still shows where it was not declared away: more padding changes the outputs.
    with pytest.raises(AssertionError, match='^padding_amount: '):
      T.check_mixer(build_mixer('kit_test_leaky', bug='padding_leak'))
  finally:   # the registry has no unregister; other tests list MIXERS
    MIXERS._entries.pop('kit_test_leaky')   # pylint: disable=protected-access
  with pytest.raises(ValueError, match=r"unknown properties \['padding'\]"):
    T.check_mixer(type('Typo', (_Planted,),
                       {'traits': MixerTraits(not_by_design={'padding': 'x'})})())


class PlantedMixerTest(T.MixerTestCase):
  """The unittest form: check_mixer plus padding under chex.variants (with and without jit)."""
  causal = True

  def make_mixer(self):
    return _Planted('none', causal=True)


def test_mixer_test_case_fails_every_test_on_a_padding_leak():
  class LeakyTest(T.MixerTestCase):
    def make_mixer(self):
      return _Planted('padding_leak')

  result = unittest.TestResult()
  unittest.defaultTestLoader.loadTestsFromTestCase(LeakyTest).run(result)
  # test_check_mixer and both chex variants of test_padding_values_under_variant
  assert result.testsRun == 3 and len(result.failures) == 3, result.errors
  assert all('padding_values: ' in text for _, text in result.failures)


def test_assert_traces_counts_a_flax_apply_and_a_jitted_function():
  module = MultiHeadAttention(num_heads=2)
  x, mask = T.random_inputs(0, 2, 8, 8)
  x_long, mask_long = T.random_inputs(0, 2, 12, 8)
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  same = [(variables, x, mask), (variables, x + 1.0, mask)]
  with pytest.raises(ValueError, match='must not wrap JAX-transformed function'):
    chex.assert_max_traces(module.apply, n=1)                 # why assert_traces wraps it
  outputs = retrace.assert_traces(module.apply, same, n=1)
  np.testing.assert_allclose(outputs[0], module.apply(variables, x, mask), atol=1e-6)
  with pytest.raises(AssertionError, match='^retrace: '):
    retrace.assert_traces(module.apply, same + [(variables, x_long, mask_long)], n=1)
  retrace.assert_traces(module.apply, same + [(variables, x_long, mask_long)], n=2)
  jitted = jax.jit(module.apply)
  retrace.assert_traces(jitted, same, n=1)
  retrace.assert_traces(jitted, same, n=0)                     # already compiled for that shape
  with pytest.raises(AssertionError, match='compiled 1 times in 1 calls'):
    retrace.assert_traces(jitted, [(variables, x_long, mask_long)], n=0)


def test_assert_close_names_the_worst_position_and_nan():
  a = np.zeros((2, 4, 3))
  b = a.copy()
  b[1, 2, 0], b[0, 1, 1] = 0.5, np.nan
  with pytest.raises(T.PropertyError, match=r'^jit: batch 0, position 1, feature 1: '
                                            r'\|a - b\| = inf'):
    T.assert_close('jit', a, b, atol=1e-3)
  mask = np.ones((2, 4, 1), bool)
  mask[0, 1] = False
  with pytest.raises(T.PropertyError, match=r'^jit: batch 1, position 2, feature 0: '
                                            r'\|a - b\| = 0.5'):
    T.assert_close('jit', a, b, atol=1e-3, where=mask)


# Issue 54: mixers without dropout, with the README's `(x, mask)` signature, and bugs the
# property checks alone missed or crashed on.
class _MeanPool(nn.Module):
  """The README's mixer without dropout: each token plus the mean of the real tokens so far
  (causal) or of all of them. `bug` plants one fault."""
  causal: bool = False
  bug: str = 'none'

  @nn.compact
  def __call__(self, x, mask, *, deterministic=True):   # mask required: never None
    del deterministic
    real = jnp.where(mask[..., None], x, 0)
    count = mask.astype(x.dtype)[..., None]
    if self.causal:
      seen = jnp.cumsum(real, 1) / jnp.maximum(jnp.cumsum(count, 1), 1)
      if self.bug == 'future_leak':   # token t sees real token t + 1
        seen = seen + 0.1 * jnp.pad(real[:, 1:], ((0, 0), (0, 1), (0, 0)))
      mean = seen
    else:
      mean = real.sum(1, keepdims=True) / count.sum(1, keepdims=True)
    if self.bug == 'padding_leak':
      mean = mean + 0.1 * x.mean(1, keepdims=True)
    y = nn.Dense(x.shape[-1])(x + mean)
    if self.bug == 'wide':
      return jnp.concatenate([y, y], -1)
    if self.bug == 'float16':
      return y.astype(jnp.float16)
    if self.bug == 'raises' and mask.shape[1] > 16:   # fails on the padding_amount input only
      raise ValueError('segments must divide the length')
    return y


class _NoDropoutField(nn.Module):
  """A bidirectional mixer that takes `deterministic` but has no dropout: a linear map of each
  token and of the masked mean, mask=None allowed."""

  @nn.compact
  def __call__(self, x, mask=None, *, deterministic=True):
    mask = jnp.ones(x.shape[:2], bool) if mask is None else mask
    real = jnp.where(mask[..., None], x, 0)
    mean = real.sum(1, keepdims=True) / mask.sum(1)[:, None, None]
    return nn.Dense(x.shape[-1])(x) + nn.Dense(x.shape[-1])(mean)


@pytest.mark.parametrize('mixer', [_NoDropoutField(), _MeanPool(causal=True)],
                         ids=['no_dropout_field', 'causal_x_mask_signature'])
def test_correct_mixers_without_dropout_pass_with_the_skips_named(mixer):
  report = T.check_mixer(mixer)
  assert report['dropout'] == 'skipped: the mixer has no dropout field (e.g. dropout_rate)'
  assert report['bfloat16'] == 'skipped: the mixer has no `dtype` field'
  checked = {p for p in T.PROPERTIES if p not in ('dropout', 'bfloat16')}
  if not getattr(mixer, 'causal', False):
    checked.discard('causal')
  assert {p: report[p] for p in checked} == {p: 'ok' for p in checked}, report


@pytest.mark.parametrize('bug,prop,says', [
    ('wide', 'output', r'shape \(2, 16, 32\) for input \(2, 16, 16\)'),
    ('float16', 'output', r'dtype float16 for a float32 input'),
    ('future_leak', 'causal', r'changing tokens after position 8 changed an output'),
    ('padding_leak', 'padding_values', r'batch 1, position \d+, feature \d+'),
    ('raises', 'padding_amount', r"_MeanPool raised ValueError: segments must divide the length "
                                 r"\(raised at test_mixer_kit.py:\d+: raise ValueError"),
])
def test_check_mixer_names_the_property_of_each_planted_bug(bug, prop, says):
  with pytest.raises(T.PropertyError) as caught:
    T.check_mixer(_MeanPool(causal=True, bug=bug))
  first = str(caught.value).splitlines()[0]
  assert caught.value.property == prop and re.match(f'{prop}: .*{says}', first), str(caught.value)
  if prop == 'output':   # nothing else can be judged on an unusable output
    assert set(caught.value.report.values()) == {'FAILED', 'not run: output failed',
                                                 'skipped: the mixer has no dropout field (e.g. '
                                                 'dropout_rate)',
                                                 'skipped: the mixer has no `dtype` field'}
