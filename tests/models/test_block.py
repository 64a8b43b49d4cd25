"""The shared pre-LN block: its formula, its parameter names, causality, and model_kwargs."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from poolformers_jax.layers import MultiHeadAttention
from poolformers_jax.models.block import PreNormResidual, TransformerBlock, model_kwargs


def _x(seed=0, shape=(2, 7, 8)):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _layer_norm(x, p, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p['scale'] + p['bias']


def test_block_is_two_pre_ln_residuals_with_named_parameters():
  block = TransformerBlock('softmax', num_heads=2, mlp_dim=16, activation='relu',
                           layer_norm_epsilon=1e-5)
  x = _x()
  mask = jnp.asarray(np.arange(7)[None] < np.array([[7], [4]]))
  params = block.init(jax.random.PRNGKey(0), x, mask)['params']
  assert set(params) == {'norm1', 'MultiHeadAttention_0', 'norm2', 'mlp'}
  h = x + MultiHeadAttention(2).apply({'params': params['MultiHeadAttention_0']},
                                      _layer_norm(x, params['norm1'], 1e-5), mask)
  p = params['mlp']
  hidden = np.maximum(
      _layer_norm(h, params['norm2'], 1e-5) @ p['fc1']['kernel'] + p['fc1']['bias'], 0)
  expected = h + hidden @ p['fc2']['kernel'] + p['fc2']['bias']
  np.testing.assert_allclose(block.apply({'params': params}, x, mask), expected, atol=2e-5)


def test_causal_block_ignores_the_future():
  block = TransformerBlock('softmax', num_heads=2, mlp_dim=16, causal=True)
  x = _x()
  params = block.init(jax.random.PRNGKey(0), x)
  y = block.apply(params, x)
  changed = x.at[:, 4:].set(_x(1, (2, 3, 8)))
  np.testing.assert_allclose(block.apply(params, changed)[:, :4], y[:, :4], atol=1e-6)
  assert not np.allclose(block.apply(params, changed)[:, 4:], y[:, 4:])


def test_pre_norm_residual_passes_extra_arguments_and_drops_whole_branches():
  class Add(nn.Module):
    @nn.compact
    def __call__(self, x, other, *, deterministic=True):
      return x + other

  class Net(nn.Module):
    @nn.compact
    def __call__(self, x, other, deterministic=True):
      norm = nn.LayerNorm(name='norm_cross')
      return PreNormResidual(norm, Add(), drop_path_rate=0.5)(x, other,
                                                               deterministic=deterministic)

  x, other = _x(), _x(1)
  params = Net().init(jax.random.PRNGKey(0), x, other)
  assert set(params['params']) == {'norm_cross'}          # the caller names the sublayer's parts
  ln = _layer_norm(x, params['params']['norm_cross'], 1e-6)
  np.testing.assert_allclose(Net().apply(params, x, other), x + ln + other, atol=1e-5)
  y = Net().apply(params, x, other, deterministic=False, rngs={'dropout': jax.random.PRNGKey(3)})
  kept = [np.allclose(y[b], x[b] + 2 * (ln[b] + other[b]), atol=1e-5) for b in range(2)]
  dropped = [np.allclose(y[b], x[b]) for b in range(2)]
  assert all(k != d for k, d in zip(kept, dropped))        # each example: whole branch or none


def test_model_kwargs_converts_and_rejects():
  cfg = ml_collections.ConfigDict(dict(name='m', hidden_dim=4, out_dim=[3], dtype='bfloat16'))

  class M(nn.Module):
    hidden_dim: int
    out_dim: tuple = ()
    dtype: object = None

  kwargs = model_kwargs(cfg, M)
  assert kwargs == {'hidden_dim': 4, 'out_dim': (3,), 'dtype': jnp.dtype('bfloat16')}
  with pytest.raises(ValueError, match=r"unknown config.model key\(s\) \['dtype'\]"):
    model_kwargs(cfg, M, dtype=None)                         # set by the model, not the config
  with pytest.raises(ValueError, match=r"missing \['depth'\]"):
    model_kwargs(cfg, M, required=('depth',))


def test_model_kwargs_unset_placeholders():
  """A key set to None (a placeholder the dataset fills later) keeps the field's default; without
  one, a data-decided size is refused in one line saying how to fill it (no half-built model),
  another key stays None; a required key must be set, a field without a default must be a key."""

  class M(nn.Module):
    vocab_size: int
    extra: int
    cls_id: int = 101

  cfg = ml_collections.ConfigDict(dict(name='m', vocab_size=None, cls_id=None, extra=None))
  with pytest.raises(ValueError, match=r"^model 'm': config.model.\{vocab_size\} unset: the "
                     r'dataset decides them; fill them with config = poolformers_jax.config.'
                     r'complete\(config\)'):
    model_kwargs(cfg, M)
  filled = ml_collections.ConfigDict(dict(name='m', vocab_size=18, cls_id=None, extra=None))
  assert model_kwargs(filled, M) == {'vocab_size': 18, 'extra': None}
  with pytest.raises(ValueError, match=r"missing \['vocab_size'\] \(absent or None\)"):
    model_kwargs(cfg, M, required=('vocab_size',))
  with pytest.raises(ValueError, match=r"missing \['vocab_size'\]"):
    model_kwargs(ml_collections.ConfigDict(dict(name='m', cls_id=7, extra=1)), M)
