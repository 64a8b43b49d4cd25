"""HVT token pooling: values and masks against numpy loops (1D and 2D; max, avg, conv), the
196 -> 97 -> 48 -> 23 -> 11 lengths, padding, jit, gradients, dtypes and errors."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import HierarchicalPool
from poolformers_jax.layers.hierarchical_pool import pooled_length


def _windows_1d(length, k, s):
  return [list(range(start, start + k)) for start in range(0, length - k + 1, s)]


def _windows_2d(h, w, k, s):
  out = []
  for r in range(0, h - k + 1, s):
    for c in range(0, w - k + 1, s):
      out.append([(r + i) * w + (c + j) for i in range(k) for j in range(k)])
  return out


def _numpy_pool(x, mask, windows, method, conv=None):
  """Loop over examples and windows; only real tokens take part; a window is real if any is."""
  x, mask = np.asarray(x, np.float64), np.asarray(mask)
  b, _, d = x.shape
  y = np.zeros((b, len(windows), d))
  m = np.zeros((b, len(windows)), bool)
  for bi in range(b):
    for wi, win in enumerate(windows):
      real = [t for t in win if mask[bi, t]]
      m[bi, wi] = bool(real)
      if not real:
        continue
      if method == 'max':
        y[bi, wi] = np.max(x[bi, real], axis=0)
      elif method == 'avg':
        y[bi, wi] = np.mean(x[bi, real], axis=0)
      else:  # conv: kernel [window..., D_in, D_out] flattened over the window, padded inputs = 0
        kernel, bias = conv
        kernel = np.asarray(kernel, np.float64).reshape(len(win), d, d)
        y[bi, wi] = bias + sum((x[bi, t] * mask[bi, t]) @ kernel[p] for p, t in enumerate(win))
  return y, m


@pytest.mark.parametrize('method', ['max', 'avg', 'conv'])
@pytest.mark.parametrize('grid,k,s', [(None, 3, 2), (None, 2, 1), ((5, 6), 3, 2)])
def test_matches_numpy_loop(method, grid, k, s):
  length = 30 if grid else 11
  x, mask = T.random_inputs(0, 2, length, 4, num_real=[length, length - 7])
  module = HierarchicalPool(method, k, s, grid=grid)
  variables, (y, pooled_mask) = T.init_apply(module, x, mask)
  windows = _windows_1d(length, k, s) if grid is None else _windows_2d(*grid, k, s)
  conv = None
  if method == 'conv':
    p = variables['params']['conv']
    conv = (p['kernel'], p['bias'])
  ref, ref_mask = _numpy_pool(x, mask, windows, method, conv)
  np.testing.assert_array_equal(np.asarray(pooled_mask), ref_mask)
  np.testing.assert_allclose(np.asarray(y)[ref_mask], ref[ref_mask], atol=1e-5, rtol=1e-5)
  assert np.all(np.asarray(y)[~ref_mask] == 0.0)


def test_hvt_lengths_196_97_48_23_11():
  lengths = [196]
  x = jnp.zeros((1, 196, 8))
  for _ in range(4):
    x, _ = HierarchicalPool('max').apply({}, x)
    lengths.append(x.shape[1])
  assert lengths == [196, 97, 48, 23, 11]
  assert [pooled_length(n) for n in lengths[:-1]] == lengths[1:]


def test_padding_values_never_matter():
  x, mask = T.random_inputs(1, 2, 13, 4, num_real=[13, 6])
  noise = jax.random.normal(jax.random.PRNGKey(3), x.shape) * 100.0
  x2 = jnp.where(mask[..., None], x, noise)
  for method in ('max', 'avg', 'conv'):
    module = HierarchicalPool(method)
    variables = module.init(jax.random.PRNGKey(0), x, mask)
    y1, m1 = module.apply(variables, x, mask)
    y2, m2 = module.apply(variables, x2, mask)
    np.testing.assert_array_equal(np.asarray(m1), np.asarray(m2))
    np.testing.assert_allclose(np.asarray(y1), np.asarray(y2), atol=1e-5)


def test_jit_grads_dtypes():
  x, mask = T.random_inputs(2, 2, 12, 8, num_real=[12, 9])
  module = HierarchicalPool('conv')
  T.assert_jit_matches(module, x, mask)
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  grads = jax.grad(lambda v, xx: jnp.sum(module.apply(v, xx, mask)[0] ** 2), argnums=(0, 1))(
      variables, x)
  chex.assert_tree_all_finite(grads)
  assert float(jnp.abs(grads[0]['params']['conv']['kernel']).sum()) > 0
  for method in ('max', 'avg'):
    y, m = HierarchicalPool(method).apply({}, x.astype(jnp.bfloat16), mask)
    assert y.dtype == jnp.bfloat16 and m.dtype == jnp.bool_ and y.shape == (2, 5, 8)


def test_errors_are_one_clear_line():
  x = jnp.zeros((1, 2, 4))
  with pytest.raises(ValueError, match='kernel_size=3 is larger than the input'):
    HierarchicalPool('max').apply({}, x)
  with pytest.raises(ValueError, match=r'grid=\(3, 3\) does not hold the 10 tokens'):
    HierarchicalPool('max', grid=(3, 3)).apply({}, jnp.zeros((1, 10, 4)))
  with pytest.raises(ValueError, match="unknown method 'min'"):
    HierarchicalPool('min').apply({}, jnp.zeros((1, 10, 4)))
