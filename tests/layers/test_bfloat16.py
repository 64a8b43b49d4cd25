"""bfloat16 compute (float32 parameters), as accelerator users train: every registered mixer's
output stays within a few times the error that merely STORING its input and parameters in
bfloat16 already causes. A mixer that summed over the sequence in bfloat16 (PoNet's global
aggregation, AdaMRA's kernel sums, ContextPool's weighted sums, attention's softmax) would exceed
it by a factor growing with the length; max pooling is exact in any dtype. AdaMRA's routing is
a discontinuous argmax: the few tokens that a rounding sends to another head are counted apart
and compared only where all three computations route alike. The check and its bound are the
kit's (poolformers_jax.testing.assert_bfloat16_close), run here at a long length."""
import jax
import jax.numpy as jnp
import pytest

from poolformers_jax import testing as T
from poolformers_jax.layers import MIXERS, build_mixer

LENGTH, DIM = 1024, 64
KWARGS = {'ponet': dict(segment_num=32), 'msac': dict(windows=(1, 3)), 'sac': dict(window=3)}


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_bfloat16_compute_error_is_the_storage_error(name):
  """The kit's bf16 property (poolformers_jax.testing.bf16_bound) at a length where summing in
  bfloat16 would show."""
  x, mask = T.random_inputs(3, 2, LENGTH, DIM, num_real=[LENGTH, 700])
  mixer = build_mixer(name, shared=dict(num_heads=2), **KWARGS.get(name, {}))
  variables = mixer.init(jax.random.PRNGKey(0), x, mask)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))
  compute_error, storage_error = T.assert_bfloat16_close(mixer, x, mask, variables=variables)
  assert 0 < storage_error < 0.05, storage_error   # the bound is not vacuous
  assert compute_error > 0, compute_error           # bfloat16 did run
