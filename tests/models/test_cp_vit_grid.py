"""CP-ViT on the image grid (ContextPool Fig. 3): patches pool each other with a 2D Gaussian over
the patch grid (distances and sigma = r * max(h, w) * s in patch units), the class token is kept
out of the pooling (neither pooled nor pooled from). Eq. 4 is recomputed in numpy from the sown
pooling weights w and widths sigma with 2D distances."""
import jax
import jax.numpy as jnp
import numpy as np
from test_vit import images, random_variables, tiny

from poolformers_jax.layers.context_pool import ContextPool

H, W, D = 3, 4, 8


def test_patches_pool_on_the_grid_and_the_class_token_stays():
  x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 1 + H * W, D)), jnp.float32)
  pool = ContextPool(token_grid=(H, W), prefix_tokens=1, size_ratio=0.5)
  variables = random_variables(pool, x)
  y, state = jax.jit(lambda v, t: pool.apply(v, t, mutable=['intermediates']))(variables, x)
  y, inter = np.asarray(y, np.float64), state['intermediates']
  w = np.asarray(inter['pooling_weights'][0], np.float64)      # softmax over the 12 patches only
  sigma = np.asarray(inter['sigma'][0], np.float64)
  assert w.shape == sigma.shape == (2, H * W)
  np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(y[:, 0], np.asarray(x[:, 0]))   # class token untouched
  rows, cols = np.divmod(np.arange(H * W), W)
  dist2 = (rows[:, None] - rows[None]) ** 2 + (cols[:, None] - cols[None]) ** 2
  assert np.all(sigma <= 0.5 * max(H, W) + 1e-6)                # sigma = r max(h, w) s, s <= 1
  patches = np.asarray(x[:, 1:], np.float64)
  for b in range(2):
    weights = w[b][None, :] * np.exp(-dist2 / (2 * sigma[b][:, None] ** 2))     # w_j g_ij
    expected = weights @ patches[b] / weights.sum(-1, keepdims=True)            # Eq. 4
    np.testing.assert_allclose(y[b, 1:], expected, atol=1e-5, rtol=1e-5)
  # The old CP-ViT (1D Gaussian over the raster sequence, class token at position 0) differs.
  old = np.asarray(ContextPool(size_ratio=0.5).apply(variables, x))
  assert np.abs(old[:, 1:] - y[:, 1:]).max() > 1e-3


def test_cp_vit_passes_its_grid_and_keeps_its_parameter_count():
  model = tiny('vit', classifier='token', mixer='contextpool')
  x = images()
  variables = random_variables(model, x)
  _, state = jax.jit(lambda v, t: model.apply(v, t, mutable=['intermediates']))(variables, x)
  sigma = state['intermediates']['block0']['ContextPoolAttention_0']['context_pool']['sigma'][0]
  assert sigma.shape == (2, 64)                                 # 8 x 8 patches, no class token
  # The predictor still runs along the raster sequence: CP-ViT's parameters are unchanged.
  kernel = variables['params']['block0']['ContextPoolAttention_0']['context_pool']['predictor']
  assert kernel['conv1']['kernel'].shape == (3, 16, 8)
