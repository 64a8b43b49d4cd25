"""bfloat16 compute (float32 parameters), as accelerator users train: every registered mixer's
output stays within a few times the error that merely STORING its input and parameters in
bfloat16 already causes. A mixer that summed over the sequence in bfloat16 (PoNet's global
aggregation, AdaMRA's kernel sums, ContextPool's weighted sums, attention's softmax) would exceed
it by a factor growing with the length; max pooling is exact in any dtype. AdaMRA's routing is
a discontinuous argmax: the few tokens that a rounding sends to another head are counted apart
and compared only where all three computations route alike."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import MIXERS, build_mixer

LENGTH, DIM = 1024, 64
KWARGS = {'ponet': dict(segment_num=32), 'msac': dict(windows=(1, 3)), 'sac': dict(window=3)}


def _to_bf16_and_back(tree):
  return jax.tree.map(lambda a: a.astype(jnp.bfloat16).astype(a.dtype), tree)


def _relative_error(y, reference, mask):
  real = np.asarray(mask)[..., None]
  diff = np.abs(np.asarray(y, np.float32) - np.asarray(reference, np.float32)) * real
  return float(diff.max() / (np.abs(np.asarray(reference)) * real).max())


def _apply(module, variables, x, mask):
  """(output, routed head per token or None)."""
  y, state = module.apply(variables, x, mask, mutable=['intermediates'])
  routed = state.get('intermediates', {})
  found = [v for path, v in jax.tree_util.tree_flatten_with_path(routed)[0]
           if 'routed_head' in jax.tree_util.keystr(path)]
  return y, (np.asarray(found[0]) if found else None)


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_bfloat16_compute_error_is_the_storage_error(name):
  x, mask = T.random_inputs(3, 2, LENGTH, DIM, num_real=[LENGTH, 700])
  mixer = lambda dtype: build_mixer(name, shared=dict(num_heads=2, dtype=dtype),
                                    **KWARGS.get(name, {}))
  variables = mixer(None).init(jax.random.PRNGKey(0), x, mask)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))
  reference, heads = _apply(mixer(None), variables, x, mask)                # float32 throughout
  stored, stored_heads = _apply(mixer(None), _to_bf16_and_back(variables), _to_bf16_and_back(x),
                                mask)
  computed, computed_heads = _apply(mixer(jnp.bfloat16), variables, x.astype(jnp.bfloat16), mask)
  assert computed.dtype == jnp.bfloat16
  compared = np.asarray(mask)
  if heads is not None:   # AdaMRA: tokens routed alike by all three
    alike = (heads == stored_heads) & (heads == computed_heads)
    assert alike[compared].mean() > 0.97, alike[compared].mean()
    compared = compared & alike
  storage_error = _relative_error(stored, reference, compared)
  compute_error = _relative_error(computed, reference, compared)
  # One bf16 rounding of the output alone is up to 2^-9 relative; compute may add a few more.
  assert 0 < storage_error < 0.05, storage_error
  assert compute_error <= 4 * storage_error + 2 ** -7, (compute_error, storage_error)
