"""Swin / CP-Swin (models/swin.py): shifted-window mask and block vs numpy constructions from the
geometry, ContextPool inside windows vs numpy, tiny forward/backward, Table 6 parameter counts."""
import importlib.util
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import config as config_lib
from poolformers_jax.models import build_model
from poolformers_jax.models.swin import (
  SwinBlock,
  SwinTransformer,
  WindowContextPool,
  relative_position_index,
  shifted_window_mask,
  window_partition,
)

_CONFIG_PATH = os.path.join(os.path.dirname(__file__), '..', '..', 'configs', 'imagenet.py')
_spec = importlib.util.spec_from_file_location('imagenet_config', _CONFIG_PATH)
imagenet_config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(imagenet_config)


def geometry(height, width, window, shift):
  """Per token (row-major over the ORIGINAL image): its window id after the cyclic shift by
  -shift, and its coordinates in the shifted frame."""
  rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing='ij')
  rr, cc = (rows - shift) % height, (cols - shift) % width      # where the roll moves it
  win = (rr // window) * (width // window) + cc // window
  return rows.ravel(), cols.ravel(), rr.ravel(), cc.ravel(), win.ravel()


def allowed_pairs(height, width, window, shift):
  """[N, N] over original tokens: same shifted window AND neighbours without wrap-around, i.e.
  the roll did not change their offset (the definition of the SW-MSA mask)."""
  rows, cols, rr, cc, win = geometry(height, width, window, shift)
  same_window = win[:, None] == win[None, :]
  no_wrap = ((rows[:, None] - rows[None, :]) == (rr[:, None] - rr[None, :])) & \
            ((cols[:, None] - cols[None, :]) == (cc[:, None] - cc[None, :]))
  return same_window & no_wrap


@pytest.mark.parametrize('height,width,window,shift', [(8, 8, 4, 2), (8, 12, 4, 2), (14, 14, 7, 3)])
def test_shifted_window_mask_matches_geometry(height, width, window, shift):
  mask = shifted_window_mask(height, width, window, shift)          # [nW, M^2, M^2]
  rows, cols, rr, cc, win = geometry(height, width, window, shift)
  ref = allowed_pairs(height, width, window, shift)
  # Token at window slot k of window w: shifted-frame position (w // nWc * M + k // M, ...).
  n_wc = width // window
  for w in range(mask.shape[0]):
    for k in range(window * window):
      r = (w // n_wc) * window + k // window
      c = (w % n_wc) * window + k % window
      i = np.flatnonzero((rr == r) & (cc == c))[0]
      for k2 in range(window * window):
        r2 = (w // n_wc) * window + k2 // window
        c2 = (w % n_wc) * window + k2 % window
        j = np.flatnonzero((rr == r2) & (cc == c2))[0]
        assert mask[w, k, k2] == ref[i, j], (w, k, k2)
  # Without a shift nothing is masked; with one, only the last window row/column is split.
  assert mask[0].all() and not mask[-1].all()


def test_relative_position_index_matches_loop():
  m = 3
  index = relative_position_index(m)
  for i in range(m * m):
    for j in range(m * m):
      dy, dx = i // m - j // m, i % m - j % m
      assert index[i, j] == (dy + m - 1) * (2 * m - 1) + (dx + m - 1)


def _layer_norm(x, p, eps=1e-5):
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * p['scale'] + p['bias']


def _dense(x, p):
  return x @ np.asarray(p['kernel'], np.float64) + (np.asarray(p['bias']) if 'bias' in p else 0)


def numpy_swin_block(params, x, window, shift, heads):
  """SW-MSA block computed as global attention over ORIGINAL tokens with the geometric mask."""
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
  b, h, w, c = x.shape
  tokens = x.reshape(b, h * w, c).astype(np.float64)
  y = _layer_norm(tokens, p['norm1'])
  qkv = _dense(y, p['attn']['qkv']).reshape(b, h * w, 3, heads, c // heads)
  q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
  allowed = allowed_pairs(h, w, window, shift)
  _, _, rr, cc, _ = geometry(h, w, window, shift)
  table = p['attn']['relative_position_bias_table']
  bias_index = ((rr[:, None] - rr[None, :] + window - 1) * (2 * window - 1)
                + cc[:, None] - cc[None, :] + window - 1)
  out = np.zeros_like(q)
  for bi in range(b):
    for hd in range(heads):
      for i in range(h * w):
        js = np.flatnonzero(allowed[i])
        s = q[bi, i, hd] @ k[bi, js, hd].T / np.sqrt(c // heads) + table[bias_index[i, js], hd]
        a = np.exp(s - s.max())
        out[bi, i, hd] = (a / a.sum()) @ v[bi, js, hd]
  tokens = tokens + _dense(out.reshape(b, h * w, c), p['attn']['proj'])
  z = _dense(_layer_norm(tokens, p['norm2']), p['mlp']['fc1'])
  z = 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2)))      # exact GELU
  return (tokens + _dense(z, p['mlp']['fc2'])).reshape(b, h, w, c)


@pytest.mark.parametrize('shift', [0, 2])
def test_swin_block_matches_numpy_global_attention_with_geometric_mask(shift):
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 8))
  block = SwinBlock(num_heads=2, window=4, shift=shift)
  variables = block.init(jax.random.PRNGKey(1), x)
  # Make the relative bias large enough to matter.
  params = jax.tree_util.tree_map(lambda a: a, variables['params'])
  params['attn']['relative_position_bias_table'] = jax.random.normal(
      jax.random.PRNGKey(2), params['attn']['relative_position_bias_table'].shape)
  y = jax.jit(block.apply)({'params': params}, x)
  ref = numpy_swin_block(params, np.asarray(x), 4, shift, 2)
  np.testing.assert_allclose(np.asarray(y), ref, atol=2e-4, rtol=2e-4)


def test_window_context_pool_matches_numpy_eq4_in_2d():
  """y_i = sum_j w_j g_ij x_j / sum_j w_j g_ij over the allowed tokens of i's shifted window,
  g_ij = exp(-|p_j - p_i|^2 / 2 sigma_i^2) with 2D in-window positions; w and sigma are read
  from the sown intermediates (they come from the predictor, tested in test_context_pool)."""
  h = w = 8
  window, shift = 4, 2
  x = jax.random.normal(jax.random.PRNGKey(0), (2, h, w, 8))
  module = WindowContextPool(window=window, shift=shift, predictor_dim=4)
  allowed = shifted_window_mask(h, w, window, shift)
  variables = module.init(jax.random.PRNGKey(1), x, allowed)
  y, state = module.apply(variables, x, allowed, mutable=['intermediates'])
  (w_j,) = state['intermediates']['pooling_weights']               # [B nW, M^2]
  (sigma,) = state['intermediates']['sigma']                       # [B nW, M^2]
  assert float(sigma.max()) <= 0.1 * window * window + 1e-6        # sigma = r n s, n = M^2
  tokens = np.asarray(window_partition(jnp.roll(x, (-shift, -shift), (1, 2)), window))
  w_j, sigma = np.asarray(w_j, np.float64), np.asarray(sigma, np.float64)
  num_windows = (h // window) * (w // window)
  ref = np.zeros_like(tokens, dtype=np.float64)
  for bw in range(tokens.shape[0]):
    for i in range(window * window):
      acc, norm = 0.0, 0.0
      for j in range(window * window):
        if not allowed[bw % num_windows, i, j]:
          continue
        d2 = (i // window - j // window) ** 2 + (i % window - j % window) ** 2
        g = np.exp(-d2 / (2 * sigma[bw, i] ** 2))
        acc = acc + w_j[bw, j] * g * tokens[bw, j]
        norm += w_j[bw, j] * g
      ref[bw, i] = acc / norm
  np.testing.assert_allclose(np.asarray(y), ref, atol=1e-5, rtol=1e-4)


# make test-fast builds the plain Swin; CP-Swin runs in make test.
@pytest.mark.parametrize('context_pool', [False, pytest.param(True, marks=pytest.mark.slow)])
def test_tiny_swin_forward_backward_finite(context_pool):
  # 32x32 -> 8x8 tokens (window 4, shifted) -> 4x4 (one window, no shift).
  model = SwinTransformer(num_classes=5, embed_dim=16, depths=(2, 1), num_heads=(2, 4),
                          window_size=4, drop_path_rate=0.2, context_pool=context_pool,
                          cp_predictor_dim=4)
  images = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 32, 3))
  labels = jnp.array([1, 3])
  variables = jax.jit(model.init)(jax.random.PRNGKey(1), images)

  def loss(params):
    logits = model.apply({'params': params}, images, deterministic=False,
                         rngs={'dropout': jax.random.PRNGKey(2)})
    assert logits.shape == (2, 5) and logits.dtype == jnp.float32
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1))

  value, grads = jax.jit(jax.value_and_grad(loss))(variables['params'])
  assert np.isfinite(float(value))
  leaves = jax.tree_util.tree_leaves_with_path(grads)
  for path, g in leaves:
    assert np.all(np.isfinite(np.asarray(g))), path
  assert sum(float(jnp.abs(g).sum()) for _, g in leaves) > 0
  has_cp = any('context_pool' in jax.tree_util.keystr(path) for path, _ in leaves)
  assert has_cp == context_pool
  with pytest.raises(ValueError, match='not divisible by the window'):
    model.init(jax.random.PRNGKey(0), jnp.zeros((1, 40, 40, 3)))


def test_full_size_parameter_counts_match_table6():
  """Swin-B 87.77M (Table 6: 88M); CP-Swin-B 88.64M (Table 6: 89M): both within 1%."""
  counts = {}
  for name in ('swin_b', 'cp_swin_b'):
    config = config_lib.complete(imagenet_config.get_config(name), need_files=False)
    model = build_model(config.model)
    shapes = jax.eval_shape(lambda m=model: m.init(jax.random.PRNGKey(0),
                                                   jnp.zeros((1, 224, 224, 3))))
    counts[name] = sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(shapes['params']))
  assert abs(counts['swin_b'] / 88e6 - 1) < 0.01, counts
  assert abs(counts['cp_swin_b'] / 89e6 - 1) < 0.01, counts
  # The official Swin-B count (timm / the Swin repository): 87,768,224 parameters.
  assert counts['swin_b'] == 87_768_224
