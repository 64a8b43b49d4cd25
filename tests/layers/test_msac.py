"""2D self-attention, SAC, MSAC, cross-attentive input: numpy loops, identities, properties."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import (
  MSAC,
  SAC,
  CrossAttentiveInput,
  MultiHeadAttention,
  SelfAttention2D,
  build_mixer,
)
from poolformers_jax.layers.msac import relative_distance_indices

# --------------------------------------------------------------------------- numpy reference

def _np_conv(img, kernel, bias, stride, pad):
  """Cross-correlation (Def. 1) of img [N, M, d] with kernel [n, m, d, f], zero padding `pad`."""
  n, m = kernel.shape[:2]
  padded = np.pad(img, (pad[0], pad[1], (0, 0)))
  rows = (padded.shape[0] - n) // stride + 1
  cols = (padded.shape[1] - m) // stride + 1
  out = np.zeros((rows, cols, kernel.shape[-1]))
  for i in range(rows):
    for j in range(cols):
      patch = padded[i * stride:i * stride + n, j * stride:j * stride + m]
      out[i, j] = np.einsum('abd,abdf->f', patch, kernel) + bias
  return out


def _same_pad(size, window, stride):
  out = -(-size // stride)
  total = max((out - 1) * stride + window - size, 0)
  return (total // 2, total - total // 2)


def _np_sac_single(p, img, heads, stride=1, causal=False, key_mask=None, regular=False):
  """One example of SAC (Eqs. 1-4 with n×m filters, Sec. 3) by explicit loops, float64."""
  img = np.asarray(img, np.float64)
  get = lambda name: (np.asarray(p[name]['kernel'], np.float64),
                      np.asarray(p[name]['bias'], np.float64))
  n, m = get('query')[0].shape[:2]
  if causal:
    pad = ((0, 0), (m - 1, 0))
  else:
    pad = (_same_pad(img.shape[0], n, stride), _same_pad(img.shape[1], m, stride))
  q, k, v = (_np_conv(img, *get(name), stride, pad) for name in ('query', 'key', 'value'))
  rows, cols, f = q.shape
  dh = f // heads
  table = np.asarray(p['relative_bias'], np.float64) if 'relative_bias' in p else None
  y = np.zeros_like(q)
  for h in range(heads):
    sl = slice(h * dh, (h + 1) * dh)
    for i in range(rows):
      for j in range(cols):
        scores, values = [], []
        for r in range(rows):
          for t in range(cols):
            key_index = r * cols + t
            if key_mask is not None and not key_mask[key_index]:
              continue
            if causal and key_index > i * cols + j:
              continue
            s = q[i, j, sl] @ k[r, t, sl] / np.sqrt(dh)                       # Eq. 2
            if table is not None:                                             # Eq. 3
              s += table[h, min(abs(i - r), table.shape[1] - 1),
                         min(abs(j - t), table.shape[2] - 1)]
            scores.append(s)
            values.append(v[r, t, sl])
        a = np.exp(np.array(scores) - max(scores))
        a /= a.sum()
        y[i, j, sl] = a @ np.array(values)                                    # Eq. 4
  y = y @ get('out')[0] + get('out')[1]
  if regular:
    y_reg = _np_conv(img, *get('regular_conv'), stride, pad)
    y = np.concatenate([y, y_reg], -1) @ get('fuse')[0] + get('fuse')[1]
  return y


def _with_random_bias_table(variables, seed=0, path=('relative_bias',)):
  """Replaces the relative bias table with N(0, 1) values so that the bias really matters."""
  params = flax.core.unfreeze(variables)['params']
  node = params
  for key in path[:-1]:
    node = node[key]
  shape = node[path[-1]].shape
  node[path[-1]] = jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)
  return {'params': params}


def _image(seed, shape, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


# --------------------------------------------------------------------------- 2D self-attention

def test_self_attention_2d_without_bias_is_mha_on_flattened_image():
  x = _image(0, (2, 3, 4, 8))
  flat = x.reshape(2, 12, 8)
  mha = MultiHeadAttention(num_heads=2)
  variables = mha.init(jax.random.PRNGKey(0), flat)
  y_mha = mha.apply(variables, flat).reshape(x.shape)
  y_2d = SelfAttention2D(num_heads=2, heads='split', relative_bias=False).apply(variables, x)
  np.testing.assert_allclose(np.asarray(y_2d), np.asarray(y_mha), atol=1e-6, rtol=1e-6)


def test_self_attention_2d_with_relative_bias_matches_numpy_eq3():
  x = _image(1, (2, 3, 4, 4))
  module = SelfAttention2D(num_heads=2, max_distance=3)   # 4 columns: distance 3 is clipped to 2
  variables = _with_random_bias_table(module.init(jax.random.PRNGKey(0), x))
  y = np.asarray(module.apply(variables, x))
  p = {name: {'kernel': np.asarray(variables['params'][name]['kernel'])[None, None],
              'bias': variables['params'][name]['bias']} for name in ('query', 'key', 'value')}
  p['out'] = variables['params']['out']
  p['relative_bias'] = variables['params']['relative_bias']
  for b in range(2):
    np.testing.assert_allclose(y[b], _np_sac_single(p, x[b], heads=2), atol=2e-5, rtol=1e-4)


def test_relative_bias_indices_are_computed_in_the_program_not_embedded():
  """Eq. 3's [L, L] distance indices come from iotas in the program: the lowered SAC at 2 048
  tokens holds no [L, L] constant (as numpy arrays they were two 16 MiB constants, 2 GiB at
  16K tokens), and the indices equal the numpy definition."""
  d_row, d_col = relative_distance_indices(3, 4, 2, 3)
  r, c = np.divmod(np.arange(12), 4)
  np.testing.assert_array_equal(d_row, np.minimum(np.abs(r[:, None] - r[None, :]), 1))
  np.testing.assert_array_equal(d_col, np.minimum(np.abs(c[:, None] - c[None, :]), 2))
  module = SAC(num_heads=2, window=3)
  x = jax.ShapeDtypeStruct((1, 2048, 16), jnp.float32)
  variables = jax.eval_shape(module.init, jax.random.PRNGKey(0), jnp.zeros((1, 8, 16)))
  text = jax.jit(module.apply).lower(variables, x).as_text()
  assert len(text) < 200_000, len(text)


@pytest.mark.parametrize('relative_bias', [False, True])
def test_sac_1x1_equals_self_attention_2d(relative_bias):
  """Lemma 1: a 1×1 SAC is 2D self-attention; Dense kernels [d, f] = conv kernels [1, 1, d, f]."""
  x = _image(2, (2, 3, 4, 8))
  sa = SelfAttention2D(num_heads=2, relative_bias=relative_bias, max_distance=4)
  variables = sa.init(jax.random.PRNGKey(0), x)
  if relative_bias:
    variables = _with_random_bias_table(variables)
  params = flax.core.unfreeze(variables)['params']
  for name in ('query', 'key', 'value'):
    params[name]['kernel'] = params[name]['kernel'][None, None]
  sac = SAC(num_heads=2, window=1, regular_conv=False, relative_bias=relative_bias, max_distance=4)
  sac_shapes = jax.tree.map(jnp.shape, sac.init(jax.random.PRNGKey(1), x)['params'])
  assert jax.tree.map(jnp.shape, params) == sac_shapes
  np.testing.assert_allclose(np.asarray(sac.apply({'params': params}, x)),
                             np.asarray(sa.apply(variables, x)), atol=1e-6, rtol=1e-6)


# --------------------------------------------------------------------------- SAC numerics

@pytest.mark.parametrize('window,stride,regular', [((2, 3), 1, True), (3, 2, False)])
def test_sac_vision_matches_numpy_loop(window, stride, regular):
  x = _image(3, (2, 5, 6, 4))
  module = SAC(num_heads=2, window=window, strides=stride, regular_conv=regular, max_distance=3)
  variables = _with_random_bias_table(module.init(jax.random.PRNGKey(0), x))
  y = np.asarray(module.apply(variables, x))
  for b in range(2):
    ref = _np_sac_single(variables['params'], x[b], heads=2, stride=stride, regular=regular)
    np.testing.assert_allclose(y[b], ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize('causal,window', [(False, 2), (False, 3), (True, 3)])
def test_sac_language_matches_numpy_loop(causal, window):
  x, mask = T.random_inputs(4, 2, 7, 4, num_real=[7, 4])
  module = SAC(num_heads=2, window=window, causal=causal, regular_conv=True, features=6)
  variables = _with_random_bias_table(module.init(jax.random.PRNGKey(0), x, mask))
  y = np.asarray(module.apply(variables, x, mask))
  assert y.shape == (2, 7, 6)
  m = np.asarray(mask)
  for b in range(2):
    # Def. 1: padded tokens are zeros outside the signal; they are never keys.
    img = np.where(m[b][:, None], np.asarray(x[b]), 0.0)[None]
    ref = _np_sac_single(variables['params'], img, heads=2, causal=causal, key_mask=m[b],
                         regular=True)[0]
    np.testing.assert_allclose(y[b][m[b]], ref[m[b]], atol=2e-5, rtol=1e-4)


def test_msac_is_the_reduction_of_its_sacs():
  x, mask = T.random_inputs(5, 2, 6, 4, num_real=[6, 3])
  msac = MSAC(num_heads=2, windows=(1, 2, 3), features=4)
  variables = msac.init(jax.random.PRNGKey(0), x, mask)
  y = np.asarray(msac.apply(variables, x, mask))
  p = variables['params']
  gammas = [np.asarray(SAC(num_heads=2, window=w, features=4, regular_conv=True).apply(
      {'params': p[f'sac_{i}']}, x, mask)) for i, w in enumerate((1, 2, 3))]
  ref = (np.concatenate(gammas, -1) @ np.asarray(p['reduce']['kernel'])
         + np.asarray(p['reduce']['bias']))
  np.testing.assert_allclose(y, ref, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- mixer properties

MIXER_CASES = [
    pytest.param(lambda causal: SAC(num_heads=2, window=3, regular_conv=True, causal=causal),
                 id='sac'),
    pytest.param(lambda causal: MSAC(num_heads=2, windows=(1, 2, 3), causal=causal), id='msac'),
]


# MSAC's three windows: make test, not make test-fast (which checks the registry's MSAC in
# tests/layers/test_mixer_kit.py).
@pytest.mark.parametrize('make', MIXER_CASES[:1] + [
    pytest.param(*MIXER_CASES[1].values, marks=pytest.mark.slow, id='msac')])
@pytest.mark.parametrize('causal', [False, True])
def test_language_forms_pass_check_mixer(make, causal):
  """(The registry's defaults: tests/layers/test_mixer_kit.py.) SAC with the regular
  convolution, MSAC with a 1×2 window."""
  report = T.check_mixer(make(causal))
  assert report['causal'] == ('ok' if causal else 'skipped: not declared causal')


@pytest.mark.parametrize('make', MIXER_CASES)
def test_non_causal_sees_the_future(make):
  """Control for the causal test: without `causal`, position t does depend on t + 1."""
  x, _ = T.random_inputs(8, 1, 8, 8)
  module = make(False)
  variables = module.init(jax.random.PRNGKey(0), x)
  x2 = x.at[:, 4].set(5.0)
  y1, y2 = module.apply(variables, x), module.apply(variables, x2)
  assert not np.allclose(np.asarray(y1[:, 3]), np.asarray(y2[:, 3]), atol=1e-4)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize('cls', [SAC, MSAC])
def test_shapes_and_dtypes(cls, dtype):
  kwargs = dict(window=2) if cls is SAC else dict(windows=(1, 3))
  x, mask = T.random_inputs(9, 2, 6, 8, num_real=[6, 2], dtype=dtype)
  _, y = T.init_apply(cls(num_heads=2, **kwargs), x, mask)
  assert y.shape == x.shape and y.dtype == dtype
  image = _image(9, (2, 6, 4, 8), dtype)
  _, y_img = T.init_apply(cls(num_heads=2, features=12, strides=2, **kwargs), image)
  assert y_img.shape == (2, 3, 2, 12) and y_img.dtype == dtype
  assert bool(jnp.all(jnp.isfinite(y.astype(jnp.float32))))
  assert bool(jnp.all(jnp.isfinite(y_img.astype(jnp.float32))))


def test_vision_jit_and_grads():
  image = _image(10, (2, 4, 4, 8))
  module = MSAC(num_heads=2, windows=(1, (1, 3)))
  T.assert_jit_matches(module, image, None)
  T.assert_finite_grads(module, image, None)


def test_attention_weights_are_sown_and_masked():
  x, mask = T.random_inputs(11, 1, 5, 8, num_real=[3])
  module = SAC(num_heads=2, window=2)
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  _, state = module.apply(variables, x, mask, mutable=['intermediates'])
  (w,) = state['intermediates']['attention_weights']
  assert w.shape == (1, 2, 5, 5)
  np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-6)
  assert float(jnp.max(w[..., 3:])) == 0.0


# --------------------------------------------------------------------------- cross-attentive input

@pytest.mark.parametrize('segment', ['add', 'concat', 'none'])
def test_cross_attentive_input(segment):
  x, z = _image(12, (2, 3, 4, 3)), _image(13, (2, 3, 4, 3))
  module = CrossAttentiveInput(segment=segment, segment_dim=2)
  variables = module.init(jax.random.PRNGKey(0), x, z)
  t = np.asarray(module.apply(variables, x, z))
  xn, zn = np.asarray(x), np.asarray(z)
  if segment == 'add':
    p = variables['params']
    xn, zn = xn + np.asarray(p['x_segment']), zn + np.asarray(p['z_segment'])
  elif segment == 'concat':
    p = variables['params']
    tile = lambda s: np.broadcast_to(np.asarray(s), (2, 3, 4, 2))
    xn = np.concatenate([xn, tile(p['x_segment'])], -1)
    zn = np.concatenate([zn, tile(p['z_segment'])], -1)
  else:
    assert 'params' not in variables
  expected = np.zeros((2, 3, 8, xn.shape[-1]))
  expected[:, :, :4], expected[:, :, 4:] = xn, zn   # t = [x, z], side by side along the width
  np.testing.assert_allclose(t, expected, atol=1e-6)
  if segment != 'none':   # the segments tell the two images apart
    assert not np.allclose(variables['params']['x_segment'], variables['params']['z_segment'])


# --------------------------------------------------------------------------- errors, registry

def test_bad_input_messages():
  key = jax.random.PRNGKey(0)
  x, mask = T.random_inputs(0, 2, 4, 8)
  image = _image(0, (2, 4, 4, 8))
  cases = [
      (SAC(num_heads=2, window=5), (x, mask), r'window 1×5 is larger than the input 1×4'),
      (SAC(num_heads=2, window=(2, 3)), (x, mask), r'language form is a 1×N image'),
      (MSAC(num_heads=2, windows=(1, 5)), (image,), r'window 5×5 is larger than the input 4×4'),
      (SAC(num_heads=2), (x[0],), r'expected \[batch, length, dim\] \(language\) or'),
      (MSAC(num_heads=2), (image[None],), r'got rank 5'),
      (SAC(num_heads=3, heads='split'), (x, mask), 'does not divide the width'),
      (SAC(num_heads=2, causal=True), (image,), 'causal=True is only defined'),
      (SAC(num_heads=2), (image, mask), 'masks are only supported'),
      (SAC(num_heads=2), (x, mask[:, :2]), 'mask shape'),
      (SAC(num_heads=2, strides=2), (x, mask), 'strides=2 is not supported'),
      (MSAC(num_heads=2, windows=()), (x, mask), 'windows is empty'),
      (SelfAttention2D(num_heads=2), (x,), r'expected an image'),
  ]
  for module, args, pattern in cases:
    with pytest.raises(ValueError, match=pattern):
      module.init(key, *args)
  with pytest.raises(ValueError, match='unknown segment'):
    CrossAttentiveInput(segment='stack').init(key, image, image)


def test_registry_builds_language_forms():
  shared = dict(num_heads=2, causal=True, dropout_rate=0.1)
  m = build_mixer('msac', shared=shared, windows=(1, 3), regular_conv=False)
  assert isinstance(m, MSAC) and m.causal and m.num_heads == 2 and m.dropout_rate == 0.1
  assert tuple(m.windows) == (1, 3) and not m.regular_conv
  s = build_mixer('sac', shared=shared, window=3)
  assert isinstance(s, SAC) and s.window == 3 and s.causal
  with pytest.raises(ValueError, match='has no option'):
    build_mixer('sac', shared=shared, windows=(1, 2))
