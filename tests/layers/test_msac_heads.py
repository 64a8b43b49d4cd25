"""MSAC §2.1 heads: each head c has its own full-width filters H_Q^c, H_K^c, H_V^c producing d_o
channels; the C outputs are concatenated (C * d_o) and reduced to d_o by H_Y. heads='full' (the
default) must equal C independent single-head SACs on the slices of its filters, concatenated and
reduced by its `out`; heads='split' (standard multi-head attention) is kept as an option."""
import jax
import jax.numpy as jnp
import numpy as np

from poolformers_jax import testing as T
from poolformers_jax.layers import MSAC, SAC


def _random(tree, seed):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda a: jnp.asarray(0.5 * rng.standard_normal(a.shape), a.dtype), tree)


def test_full_heads_are_independent_full_width_single_head_sacs():
  x, mask = T.random_inputs(0, 2, 7, 6, num_real=[7, 5])
  d, heads = 6, 3
  sac = SAC(num_heads=heads, window=3, causal=True)        # heads='full' by default
  params = _random(jax.eval_shape(sac.init, jax.random.PRNGKey(0), x, mask)['params'], 1)
  assert params['query']['kernel'].shape == (1, 3, d, heads * d)   # H_Q^c for c = 1..C
  assert params['out']['kernel'].shape == (heads * d, d)           # H_Y: C d_o -> d_o
  y = np.asarray(jax.jit(sac.apply)({'params': params}, x, mask))
  single = SAC(num_heads=1, window=3, causal=True)
  outputs = []
  for c in range(heads):
    head = {name: {'kernel': params[name]['kernel'][..., c * d:(c + 1) * d],
                   'bias': params[name]['bias'][c * d:(c + 1) * d]}
            for name in ('query', 'key', 'value')}
    head['relative_bias'] = params['relative_bias'][c:c + 1]
    head['out'] = {'kernel': jnp.eye(d), 'bias': jnp.zeros(d)}    # y^c itself
    outputs.append(np.asarray(jax.jit(single.apply)({'params': head}, x, mask)))
  expected = (np.concatenate(outputs, -1) @ np.asarray(params['out']['kernel'])
              + np.asarray(params['out']['bias']))
  real = np.asarray(mask)
  np.testing.assert_allclose(y[real], expected[real], atol=2e-5, rtol=1e-5)


def test_split_heads_kept_and_different():
  x, mask = T.random_inputs(1, 2, 5, 4, num_real=[5, 5])
  split = MSAC(num_heads=2, windows=(1, 2), heads='split')
  full = MSAC(num_heads=2, windows=(1, 2))
  shapes = lambda m: jax.eval_shape(m.init, jax.random.PRNGKey(0), x, mask)['params']
  assert shapes(split)['sac_1']['value']['kernel'].shape == (1, 2, 4, 4)   # d split over heads
  assert shapes(full)['sac_1']['value']['kernel'].shape == (1, 2, 4, 8)    # C d_o
