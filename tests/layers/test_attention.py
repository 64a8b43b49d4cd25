"""Softmax and linear attention: numerics against plain numpy, padding, causality, jit, dtypes."""
import math

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import LinearAttention, MultiHeadAttention, build_mixer
from poolformers_jax.layers.attention import cudnn_unavailable_reason, resolve_implementation


def _dense(params, name, x):
  p = params['params'][name]
  return np.asarray(x) @ np.asarray(p['kernel']) + np.asarray(p['bias'])


def _numpy_reference(params, x, mask, heads, causal, kind):
  x = np.asarray(x, np.float64)
  b, l, d = x.shape
  q, k, v = (_dense(params, n, x).reshape(b, l, heads, d // heads)
             for n in ('query', 'key', 'value'))
  out = np.zeros_like(q)
  for bi in range(b):
    for h in range(heads):
      for i in range(l):
        keys = [j for j in range(l) if mask[bi, j] and (not causal or j <= i)]
        if kind == 'softmax':
          s = np.array([q[bi, i, h] @ k[bi, j, h] for j in keys]) / np.sqrt(d // heads)
          w = np.exp(s - s.max()); w /= w.sum()
        else:
          phi = lambda t: np.where(t > 0, t + 1.0, np.exp(t))
          s = np.array([phi(q[bi, i, h]) @ phi(k[bi, j, h]) for j in keys])
          w = s / s.sum()
        out[bi, i, h] = sum(wj * v[bi, j, h] for wj, j in zip(w, keys))
  return _dense(params, 'out', out.reshape(b, l, d))


@pytest.mark.parametrize('cls,kind', [(MultiHeadAttention, 'softmax'), (LinearAttention, 'linear')])
@pytest.mark.parametrize('causal', [False, True])
def test_matches_numpy_loop(cls, kind, causal):
  x, mask = T.random_inputs(0, 2, 7, 8, num_real=[7, 4])
  module = cls(num_heads=2, causal=causal)
  params, y = T.init_apply(module, x, mask)
  ref = _numpy_reference(params, x, np.asarray(mask), 2, causal, kind)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y)[m], ref[m], atol=2e-5, rtol=2e-4)


# The defaults, causal or not, pass check_mixer in tests/layers/test_mixer_kit.py; these are the
# other forms.
@pytest.mark.parametrize('module', [
    MultiHeadAttention(num_heads=2, dropout_on='weights'),
    MultiHeadAttention(num_heads=2, dropout_on='weights', causal=True),
    MultiHeadAttention(num_heads=2, implementation='xla', causal=True),
    LinearAttention(num_heads=2, feature_map='relu'),
    LinearAttention(num_heads=2, feature_map='relu', causal=True),
], ids=['weights_dropout', 'weights_dropout-causal', 'xla-causal', 'relu', 'relu-causal'])
def test_other_forms_pass_check_mixer(module):
  report = T.check_mixer(module)
  assert report['causal'] == ('ok' if module.causal else 'skipped: not declared causal')


@pytest.mark.parametrize('cls', [MultiHeadAttention, LinearAttention])
@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_shapes_and_dtypes(cls, dtype):
  x, mask = T.random_inputs(3, 2, 6, 8, dtype=dtype)
  _, y = T.init_apply(cls(num_heads=2), x, mask)
  assert y.shape == x.shape and y.dtype == dtype
  assert bool(jnp.all(jnp.isfinite(y.astype(jnp.float32))))


def test_attention_weights_are_sown_and_masked():
  x, mask = T.random_inputs(4, 1, 5, 8, num_real=[3])
  module = MultiHeadAttention(num_heads=2)
  params = module.init(jax.random.PRNGKey(0), x, mask)
  _, state = module.apply(params, x, mask, mutable=['intermediates'])
  (w,) = state['intermediates']['attention_weights']
  assert w.shape == (1, 2, 5, 5)
  np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-6)
  assert float(jnp.max(w[..., 3:])) == 0.0


def test_bad_input_messages():
  x, mask = T.random_inputs(0, 2, 6, 8)
  with pytest.raises(ValueError, match='does not divide the width'):
    MultiHeadAttention(num_heads=3).init(jax.random.PRNGKey(0), x, mask)
  with pytest.raises(ValueError, match=r'expected input of shape \[batch, length, dim\]'):
    MultiHeadAttention(num_heads=2).init(jax.random.PRNGKey(0), x[0], None)
  with pytest.raises(ValueError, match='mask shape'):
    LinearAttention(num_heads=2).init(jax.random.PRNGKey(0), x, mask[:, :3])
  with pytest.raises(ValueError, match='unknown feature_map'):
    LinearAttention(num_heads=2, feature_map='tanh').init(jax.random.PRNGKey(0), x, mask)


def test_registry_builds_and_rejects():
  m = build_mixer('softmax', shared=dict(num_heads=2, causal=True, dropout_rate=0.1))
  assert isinstance(m, MultiHeadAttention) and m.causal and m.num_heads == 2
  with pytest.raises(ValueError, match='has no option'):
    build_mixer('linear', shared=dict(num_heads=2), window=3)
  with pytest.raises(ValueError, match='unknown mixer'):
    build_mixer('nope')


def _explicit_vs(implementation, causal, x, mask):
  explicit = MultiHeadAttention(num_heads=2, causal=causal)
  other = MultiHeadAttention(num_heads=2, causal=causal, implementation=implementation)
  params = explicit.init(jax.random.PRNGKey(0), x, mask)
  loss = lambda m: lambda p, xx: jnp.sum(jnp.where(mask[..., None], m.apply(p, xx, mask), 0) ** 2)
  grads = [jax.jit(jax.value_and_grad(loss(m), argnums=(0, 1)))(params, x)
           for m in (explicit, other)]
  return params, grads


@pytest.mark.parametrize('causal', [False, True])
def test_xla_implementation_equals_explicit(causal):
  # Same parameters, padding in one sequence: values and grads (w.r.t. parameters and input)
  # agree at real positions, so xla inherits explicit's padding and causality tests.
  implementation = 'xla'
  x, mask = T.random_inputs(5, 2, 11, 16, num_real=[11, 6])
  params, ((l1, (gp1, gx1)), (l2, (gp2, gx2))) = _explicit_vs(implementation, causal, x, mask)
  np.testing.assert_allclose(float(l1), float(l2), rtol=1e-5)
  chex.assert_trees_all_close((gx1, gp1), (gx2, gp2), atol=1e-5, rtol=1e-4)
  y1 = MultiHeadAttention(2, causal=causal).apply(params, x, mask)
  y2 = MultiHeadAttention(2, causal=causal, implementation=implementation).apply(params, x, mask)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y1)[m], np.asarray(y2)[m], atol=2e-6, rtol=1e-5)


def test_xla_implementation_bf16_and_auto():
  x, mask = T.random_inputs(6, 2, 10, 16, num_real=[10, 4])
  module = MultiHeadAttention(num_heads=2, implementation='xla')
  params = module.init(jax.random.PRNGKey(0), x, mask)
  assert resolve_implementation('auto', jnp.bfloat16, 8, 'MHA') == (
      'cudnn' if cudnn_unavailable_reason(jnp.bfloat16, 8) is None else 'xla')
  assert resolve_implementation('auto', jnp.float32, 8, 'MHA') == 'xla'  # cudnn needs bf16/fp16
  xb = x.astype(jnp.bfloat16)
  y1 = MultiHeadAttention(2, dtype=jnp.bfloat16).apply(params, xb, mask)
  y2 = MultiHeadAttention(2, dtype=jnp.bfloat16, implementation='xla').apply(params, xb, mask)
  assert y2.dtype == jnp.bfloat16
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y1, np.float32)[m], np.asarray(y2, np.float32)[m],
                             atol=3e-2, rtol=3e-2)


def test_cudnn_request_fails_clearly_without_gpu():
  x, mask = T.random_inputs(0, 1, 8, 16)
  if jax.default_backend() == 'gpu':
    pytest.skip('a GPU is present: benchmarks/gpu_run.sh checks cudnn there')
  with pytest.raises(ValueError, match="implementation='cudnn' cannot run: it needs an NVIDIA GPU"):
    MultiHeadAttention(2, implementation='cudnn').init(jax.random.PRNGKey(0), x, mask)
  with pytest.raises(ValueError, match='unknown implementation'):
    MultiHeadAttention(2, implementation='flash').init(jax.random.PRNGKey(0), x, mask)
  # Only 'explicit' sows the weights; the fused paths cannot.
  module = MultiHeadAttention(2, implementation='xla')
  _, state = module.apply(module.init(jax.random.PRNGKey(0), x, mask), x, mask,
                          mutable=['intermediates'])
  assert 'attention_weights' not in state.get('intermediates', {})


def test_dropout_on_weights_drops_the_attention_probabilities():
  """dropout_on='weights' (the Nystromformer / PoNet LRA attention.py): out = W_o ((P * M / keep) V)
  for one Bernoulli mask M over the [B, H, Lq, Lk] probabilities P; 'output' drops P V instead."""
  x, mask = T.random_inputs(8, 2, 6, 8, num_real=[6, 4])
  module = MultiHeadAttention(num_heads=2, dropout_rate=0.5, dropout_on='weights')
  params = module.init(jax.random.PRNGKey(0), x, mask)
  seen = []

  def record(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if isinstance(context.module, nn.Dropout):
      seen.append((np.asarray(args[0]), np.asarray(out)))
    return out

  with nn.intercept_methods(record):
    y, state = module.apply(params, x, mask, deterministic=False, mutable=['intermediates'],
                            rngs={'dropout': jax.random.PRNGKey(5)})
  (weights,) = state['intermediates']['attention_weights']
  (probs, dropped), = seen
  np.testing.assert_allclose(probs, np.asarray(weights), rtol=1e-6)
  kept = dropped != 0
  assert 0.3 < kept.mean() < 0.7
  np.testing.assert_allclose(dropped[kept], 2 * probs[kept], rtol=1e-6)
  v = _dense(params, 'value', x).reshape(2, 6, 2, 4).transpose(0, 2, 1, 3)
  merged = np.einsum('bhqk,bhkd->bqhd', dropped, v).reshape(2, 6, 8)
  np.testing.assert_allclose(np.asarray(y), _dense(params, 'out', merged), atol=1e-5, rtol=1e-5)
  # Deterministic: the same function as the default placement.
  default = MultiHeadAttention(num_heads=2, dropout_rate=0.5)
  np.testing.assert_allclose(np.asarray(module.apply(params, x, mask)),
                             np.asarray(default.apply(params, x, mask)), rtol=1e-6, atol=1e-7)
  with pytest.raises(ValueError, match="dropout_on='weights' needs implementation='explicit'"):
    MultiHeadAttention(2, dropout_on='weights', implementation='xla').init(
        jax.random.PRNGKey(0), x, mask)
  with pytest.raises(ValueError, match="unknown dropout_on 'values'"):
    MultiHeadAttention(2, dropout_on='values').init(jax.random.PRNGKey(0), x, mask)


def _reference_linear_numpy(params, x, mask, heads):
  """attention_linear.py + attention.py of the Nystromformer / PoNet LRA code, transcribed:
  Q = (elu(Q) + 1) / sqrt(sqrt(L)), K = (elu(K) + 1) * mask / sqrt(sqrt(L)), V = V * mask,
  X = Q (K^T V) on [B, H, L, Dh] (L = Q.size(2), the padded length), heads combined, W_o."""
  x = np.asarray(x, np.float64)
  b, l, d = x.shape
  split = lambda t: t.reshape(b, l, heads, d // heads).transpose(0, 2, 1, 3)
  q, k, v = (split(_dense(params, n, x)) for n in ('query', 'key', 'value'))
  elu1 = lambda t: np.where(t > 0, t + 1.0, np.exp(t))
  m = np.asarray(mask, np.float64)[:, None, :, None]
  q = elu1(q) / math.sqrt(math.sqrt(q.shape[2]))
  k = elu1(k) * m / math.sqrt(math.sqrt(k.shape[2]))
  out = q @ (k.transpose(0, 1, 3, 2) @ (v * m))
  return _dense(params, 'out', out.transpose(0, 2, 1, 3).reshape(b, l, d))


def test_linear_reference_equals_the_lra_code_at_every_position():
  x, mask = T.random_inputs(9, 2, 10, 8, num_real=[10, 6])
  module = build_mixer('linear', shared=dict(num_heads=2), normalizer='padded_length')
  params, y = T.init_apply(module, x, mask)
  # Padded positions too: the reference computes them the same way (pooling masks them later).
  np.testing.assert_allclose(np.asarray(y), _reference_linear_numpy(params, x, mask, 2),
                             atol=2e-5, rtol=2e-5)
  for causal in (False, True):   # every property but the amount of padding (checked below)
    report = T.check_mixer(LinearAttention(num_heads=2, causal=causal, normalizer='padded_length'))
    assert report['padding_amount'].startswith('skipped: ')
    assert report['causal'] == ('ok' if causal else 'skipped: not declared causal')
  # More padding scales the attention part by sqrt(L / L'), exactly as the reference's L^(-1/2).
  extra = 6
  x_long = jnp.concatenate([x, jnp.ones((2, extra, 8)) * 3.0], axis=1)
  mask_long = jnp.concatenate([mask, jnp.zeros((2, extra), bool)], axis=1)
  bias = np.asarray(params['params']['out']['bias'])
  y_long = np.asarray(module.apply(params, x_long, mask_long))[:, :10]
  np.testing.assert_allclose(y_long - bias, (np.asarray(y) - bias) * math.sqrt(10 / 16),
                             atol=1e-5, rtol=1e-5)
  with pytest.raises(ValueError, match="unknown normalizer 'none'"):
    LinearAttention(num_heads=2, normalizer='none').init(jax.random.PRNGKey(0), x, mask)
