"""ContextPool: Eq. 4 against numpy loops, identities, padding, causality, ablations, 2D form."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import (
  ContextPool,
  ContextPool2D,
  ContextPoolAttention,
  ContextPoolOptions,
  MultiHeadAttention,
  WindowContextPool,
  build_mixer,
)
from poolformers_jax.layers.context_pool import POOL_OPTIONS

# Every non-default row of the paper's Tables 1-3.
VARIANTS = [dict(weights='uniform'), dict(weights='unnormalized'), dict(weights='nonlocal'),
            dict(locality='none'), dict(locality='fixed_window'), dict(locality='adaptive_window'),
            dict(locality='random_sparse'), dict(predictor='mlp'), dict(predictor='attention')]
VARIANT_IDS = ['-'.join(v.values()) for v in VARIANTS]
# One input shape everywhere: eager dispatch then compiles each primitive once for the file.
B, L, D = 2, 10, 16


def _gelu(t):  # tanh approximation, as flax.linen.gelu
  return 0.5 * t * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (t + 0.044715 * t ** 3)))


def _conv1d(x, p, causal):
  """Kernel-3 conv over tokens of x [L, C]: 'same' zero padding, or 2 zeros on the left."""
  k, b = np.asarray(p['kernel'], np.float64), np.asarray(p['bias'], np.float64)
  left = 2 if causal else 1
  xp = np.concatenate([np.zeros((left, x.shape[1])), x, np.zeros((2 - left, x.shape[1]))])
  return np.stack([sum(xp[i + t] @ k[t] for t in range(3)) + b for i in range(len(x))])


def _numpy_eq4(params, x, mask, causal, r=0.1):
  """The default ContextPool, written out: conv-GELU-conv, softmax w, sigmoid s, Eq. 4."""
  p = params['params']['predictor']
  out = np.zeros(x.shape)
  for b in range(x.shape[0]):
    real = np.asarray(mask[b], bool)
    xb = np.asarray(x[b], np.float64) * real[:, None]
    m = _conv1d(_gelu(_conv1d(xb, p['conv1'], causal)) * real[:, None], p['conv2'], causal)
    w = np.where(real, np.exp(m[:, 0]), 0.0)
    w /= w.sum()                                        # softmax over real tokens
    s = 1.0 / (1.0 + np.exp(-m[:, 1]))
    for i in range(len(xb)):
      n = real[:i + 1].sum() if causal else real.sum()
      sigma = r * n * s[i]
      num, den = 0.0, 0.0
      for j in range(len(xb)):
        if real[j] and (not causal or j <= i):
          g = np.exp(-(i - j) ** 2 / (2 * sigma ** 2))
          num, den = num + xb[j] * w[j] * g, den + w[j] * g
      out[b, i] = num / den
  return out


@pytest.mark.parametrize('causal', [False, True])
def test_default_matches_numpy_eq4(causal):
  x, mask = T.random_inputs(0, B, L, D, num_real=[L, 6])
  params, y = T.init_apply(ContextPool(causal=causal), x, mask)
  ref = _numpy_eq4(params, x, mask, causal)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y)[m], ref[m], atol=1e-5, rtol=1e-4)
  assert not np.allclose(np.asarray(y)[m], np.asarray(x)[m], atol=1e-2)  # it does pool


@pytest.mark.parametrize('causal', [False, True])
def test_uniform_weights_no_locality_is_masked_mean(causal):
  x, mask = T.random_inputs(1, B, L, D, num_real=[L, 6])
  _, y = T.init_apply(ContextPool(weights='uniform', locality='none', causal=causal), x, mask)
  xn, m = np.asarray(x, np.float64), np.asarray(mask)
  for b in range(B):
    for i in range(L):
      keys = [j for j in range(L) if m[b, j] and (not causal or j <= i)]
      if m[b, i]:
        np.testing.assert_allclose(np.asarray(y)[b, i], xn[b, keys].mean(0), atol=1e-6)


@pytest.mark.parametrize('causal', [False, True])
def test_zero_sigma_is_identity(causal):
  # Large pooling logits too: the normaliser is a log-space softmax, so nothing under/overflows.
  x, mask = T.random_inputs(2, B, L, D, num_real=[L, 6])
  x = x * 30.0
  _, y = T.init_apply(ContextPool(size_ratio=0.0, causal=causal), x, mask)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y)[m], np.asarray(x)[m], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize('causal', [False, True])
def test_default_passes_check_mixer(causal):
  report = T.check_mixer(ContextPool(causal=causal))
  assert report['dropout'].startswith('skipped: pooling only')   # declared by ContextPool


def test_causal_default_ignores_the_future_length():
  x, _ = T.random_inputs(4, B, L, D)
  module = ContextPool(causal=True)
  variables = module.init(jax.random.PRNGKey(0), x, None)
  # Turning the future into padding changes nothing up to t: n_i counts only tokens <= i.
  cut = jnp.arange(L)[None, :] <= 4
  y_full = module.apply(variables, x, None)
  y_cut = module.apply(variables, x, jnp.broadcast_to(cut, (B, L)))
  np.testing.assert_allclose(np.asarray(y_full)[:, :5], np.asarray(y_cut)[:, :5], atol=1e-6)


@pytest.mark.parametrize('variant', VARIANTS, ids=VARIANT_IDS)
def test_ablation_differs_from_default_and_keeps_properties(variant):
  x, mask = T.random_inputs(5, B, L, D, num_real=[L, 6])
  default_vars, y_default = T.init_apply(ContextPool(), x, mask)
  module = ContextPool(**variant)
  variables, y = T.init_apply(module, x, mask)
  m = np.asarray(mask)
  assert np.all(np.isfinite(np.asarray(y)))
  assert not np.allclose(np.asarray(y)[m], np.asarray(y_default)[m], atol=1e-3)
  T.check_mixer(module)


@pytest.mark.parametrize('variant', VARIANTS, ids=VARIANT_IDS)
def test_ablation_causal(variant):
  assert T.check_mixer(ContextPool(causal=True, **variant))['causal'] == 'ok'


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_shapes_and_dtypes(dtype):
  x, mask = T.random_inputs(7, B, L, D, num_real=[L, 6], dtype=dtype)
  x32 = x.astype(jnp.float32)
  variables, y = T.init_apply(ContextPool(), x, mask)
  assert y.shape == x.shape and y.dtype == dtype
  y32 = ContextPool().apply(variables, x32, mask)
  assert all(p.dtype == jnp.float32 for p in jax.tree_util.tree_leaves(variables))
  np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(y32), atol=0.1, rtol=0.05)


def test_sown_weights_and_sigma():
  x, mask = T.random_inputs(8, B, L, D, num_real=[L, 6])
  module = ContextPool()
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  _, state = module.apply(variables, x, mask, mutable=['intermediates'])
  (w,) = state['intermediates']['pooling_weights']
  (sigma,) = state['intermediates']['sigma']
  assert w.shape == (B, L) and sigma.shape == (B, L)
  np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-6)
  assert float(jnp.max(w[1, 6:])) == 0.0
  n = np.array([[L], [6.0]])
  assert np.all(np.asarray(sigma) > 0) and np.all(np.asarray(sigma) < 0.1 * n)


@pytest.mark.parametrize('field', ['weights', 'locality', 'predictor'])
def test_bad_option_strings(field):
  x, mask = T.random_inputs(0, B, L, D)
  for module in (ContextPool(**{field: 'bogus'}),
                 ContextPoolAttention(num_heads=2, **{field: 'bogus'})):
    with pytest.raises(ValueError, match=f"unknown {field} 'bogus'; choose one of") as err:
      module.init(jax.random.PRNGKey(0), x, mask)
    assert '\n' not in str(err.value)
  with pytest.raises(ValueError, match=f'unknown {field}'):
    ContextPool2D(**{field: 'bogus'}).init(jax.random.PRNGKey(0), jnp.zeros(IMAGE))


def test_one_definition_of_the_options_and_the_defaults_each_form_keeps():
  """ContextPoolOptions declares the options once; every form inherits them, keyword-only after
  its own positional fields, with the defaults that differ on purpose (2D window 3 pixels,
  CP-Swin's predictor width 8)."""
  from poolformers_jax.models.seq2seq import ContextPoolStep  # the decoding form
  forms = (ContextPool, ContextPool2D, WindowContextPool, ContextPoolAttention, ContextPoolStep)
  assert POOL_OPTIONS == ('weights', 'locality', 'predictor', 'size_ratio', 'predictor_dim',
                          'window_size')
  paper = dict(weights='learned', locality='gaussian', predictor='conv', size_ratio=0.1,
               predictor_dim=None, window_size=5)
  built = {ContextPool: ContextPool(), ContextPool2D: ContextPool2D(4),
           WindowContextPool: WindowContextPool(7, 3),
           ContextPoolAttention: ContextPoolAttention(2), ContextPoolStep: ContextPoolStep()}
  for cls in forms:
    assert issubclass(cls, ContextPoolOptions)
    own = {f for f in vars(cls)['__annotations__'] if f in POOL_OPTIONS}   # redeclared here
    expected = dict(paper, **{ContextPool2D: dict(window_size=3),
                              WindowContextPool: dict(predictor_dim=8)}.get(cls, {}))
    assert built[cls].pool_options() == expected, cls.__name__
    assert own == {k for k in expected if expected[k] != paper[k]}, cls.__name__
    parameters = inspect.signature(cls).parameters
    assert all(parameters[o].kind == inspect.Parameter.KEYWORD_ONLY for o in POOL_OPTIONS)
  assert built[ContextPool2D].stride == 4 and built[WindowContextPool].shift == 3


def test_bad_inputs():
  x, mask = T.random_inputs(0, B, L, D)
  with pytest.raises(ValueError, match='mask shape'):
    ContextPool().init(jax.random.PRNGKey(0), x, mask[:, :3])
  with pytest.raises(ValueError, match='not divisible by stride'):
    ContextPool2D(stride=4).init(jax.random.PRNGKey(0), jnp.zeros(IMAGE))
  with pytest.raises(ValueError, match='window_size'):
    ContextPool(locality='fixed_window', window_size=0).init(jax.random.PRNGKey(0), x, mask)


# ContextPoolAttention ------------------------------------------------------------------------

@pytest.mark.parametrize('causal', [False, True])
def test_attention_with_identity_pooling_is_plain_attention(causal):
  x, mask = T.random_inputs(9, B, L, D, num_real=[L, 6])
  module = ContextPoolAttention(num_heads=2, causal=causal, size_ratio=0.0)
  variables, y = T.init_apply(module, x, mask)
  ref = MultiHeadAttention(num_heads=2, causal=causal).apply(
      {'params': variables['params']['attention']}, x, mask)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y)[m], np.asarray(ref)[m], atol=1e-5)
  # With real pooling the queries, keys and values differ, so the output does too.
  y_cp = ContextPoolAttention(num_heads=2, causal=causal).apply(variables, x, mask)
  assert not np.allclose(np.asarray(y_cp)[m], np.asarray(ref)[m], atol=1e-3)


# ContextPoolAttention's properties, causal or not: tests/layers/test_mixer_kit.py (check_mixer).


def test_registry_passes_shared_and_pool_options():
  m = build_mixer('contextpool', shared=dict(num_heads=2, causal=True, dropout_rate=0.1),
                  locality='fixed_window', window_size=3)
  assert isinstance(m, ContextPoolAttention)
  assert (m.num_heads, m.causal, m.dropout_rate, m.locality, m.window_size) == (
      2, True, 0.1, 'fixed_window', 3)


def test_parameter_overhead_matches_table6():
  """m(X) for d = 768: conv(3, 768 -> 48) + conv(3, 48 -> 2); 12 layers add 86M -> 88M."""
  x = jax.ShapeDtypeStruct((1, 4, 768), jnp.float32)
  shapes = jax.eval_shape(ContextPoolAttention(num_heads=12).init, jax.random.PRNGKey(0), x)
  count = lambda tree: sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(tree))
  pool_params = count(shapes['params']['context_pool'])
  assert pool_params == (3 * 768 * 48 + 48) + (3 * 48 * 2 + 2)
  assert count(shapes['params']['attention']) == 4 * (768 * 768 + 768)
  vit_b = 86.6e6
  assert 87.5e6 <= vit_b + 12 * pool_params < 88.5e6   # "88M" in Table 6


# ContextPool2D -------------------------------------------------------------------------------

IMAGE = (2, 4, 6, 8)   # [B, H, W, C], not square so that H and W cannot be mixed up


def _images(seed, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(IMAGE), dtype)


def _init_apply_2d(module, x):
  variables = jax.jit(module.init)(jax.random.PRNGKey(0), x)
  return variables, jax.jit(module.apply)(variables, x)


def _numpy_avg_pool(x, k):
  b, h, w, c = x.shape
  return x.reshape(b, h // k, k, w // k, k, c).mean(axis=(2, 4))


@pytest.mark.parametrize('options', [dict(locality='fixed_window', window_size=2),
                                     dict(locality='gaussian', size_ratio=0.0)],
                         ids=['fixed_window', 'zero_sigma'])
def test_2d_uniform_local_pooling_is_average_pooling(options):
  x = _images(0)
  _, y = _init_apply_2d(ContextPool2D(stride=2, weights='uniform', **options), x)
  np.testing.assert_allclose(np.asarray(y), _numpy_avg_pool(np.asarray(x), 2), atol=1e-6)


def test_2d_uniform_no_locality_is_global_mean():
  x = _images(1)
  _, y = _init_apply_2d(ContextPool2D(stride=2, weights='uniform', locality='none'), x)
  ref = np.broadcast_to(np.asarray(x).mean(axis=(1, 2), keepdims=True), y.shape)
  np.testing.assert_allclose(np.asarray(y), ref, atol=1e-6)


def test_2d_gaussian_matches_numpy_loop():
  """Eq. 4 on a grid, stride 2, MLP predictor (easy to write out): cell centres at 2u+0.5,
  s averaged over the cell, sigma = r * max(H, W) * s."""
  x = _images(2)
  variables, y = _init_apply_2d(ContextPool2D(stride=2, predictor='mlp'), x)
  p = variables['params']['predictor']
  dense = lambda t, q: t @ np.asarray(q['kernel'], np.float64) + np.asarray(q['bias'], np.float64)
  _, h, w_, c = IMAGE
  for b in range(IMAGE[0]):
    xn = np.asarray(x, np.float64)[b]
    m = dense(_gelu(dense(xn, p['fc1'])), p['fc2'])             # [H, W, 2]: (w, s) logits
    w = np.exp(m[..., 0]) / np.exp(m[..., 0]).sum()
    for u in range(h // 2):
      for v in range(w_ // 2):
        s = 1 / (1 + np.exp(-m[2 * u:2 * u + 2, 2 * v:2 * v + 2, 1].mean()))
        sigma = 0.1 * max(h, w_) * s
        num, den = 0.0, 0.0
        for i in range(h):
          for j in range(w_):
            g = np.exp(-((i - 2 * u - 0.5) ** 2 + (j - 2 * v - 0.5) ** 2) / (2 * sigma ** 2))
            num, den = num + xn[i, j] * w[i, j] * g, den + w[i, j] * g
        np.testing.assert_allclose(np.asarray(y)[b, u, v], num / den, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_2d_shapes_dtypes_grads(dtype):
  x = _images(3, dtype=dtype)
  module = ContextPool2D(stride=2)
  variables, y = _init_apply_2d(module, x)
  assert y.shape == (2, 2, 3, 8) and y.dtype == dtype
  loss = lambda v, xx: jnp.sum(module.apply(v, xx).astype(jnp.float32) ** 2)
  grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(variables, x)
  assert all(bool(jnp.all(jnp.isfinite(g.astype(jnp.float32))))
             for g in jax.tree_util.tree_leaves(grads))
  assert sum(float(jnp.abs(g.astype(jnp.float32)).sum())
             for g in jax.tree_util.tree_leaves(grads[0])) > 0
