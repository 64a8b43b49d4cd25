"""The mask contract (layers/common.py `check_mask`): a mask is bool, or integers / floats
holding only 0 and 1. A PyTorch-style additive mask (0 = real, -1e9 = padding) would act as its
inverse (it is non-zero exactly at the padding), NaN as True: every registered mixer and the
model's mask entry (TransformerBlock) refuse them, and counts, in one line; a 0 / 1 float mask
gives the bool mask's output; under jit (values unseen) the dtype is still checked."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_mixer_kit import SMALL

from poolformers_jax import testing as T
from poolformers_jax.layers import MIXERS, build_mixer
from poolformers_jax.models.block import TransformerBlock

REFUSED = r': a mask is bool, or 0 / 1 integers or floats \(1 = real token, 0 = padding\); '


def _entries():
  cases = [pytest.param(lambda name=name: build_mixer(name, shared=dict(num_heads=2),
                                                      **SMALL.get(name, {})), id=name)
           for name in sorted(MIXERS)]
  cases.append(pytest.param(lambda: TransformerBlock('ponet', 2, 16, dict(segment_num=4)),
                            id='TransformerBlock'))
  return cases


@pytest.mark.parametrize('make', _entries())
def test_additive_and_nan_masks_are_refused_and_0_1_masks_equal_bool(make):
  module: nn.Module = make()
  x, mask = T.random_inputs(0, 2, 16, 8, num_real=[16, 11])
  variables = module.init(jax.random.PRNGKey(0), x, mask)
  apply = lambda m: module.apply(variables, x, m)
  additive = jnp.where(mask, 0.0, -1e9)
  with pytest.raises(ValueError, match=REFUSED + r'.*holding -1000000000\.0') as error:
    apply(additive)
  assert '\n' not in str(error.value)
  with pytest.raises(ValueError, match=REFUSED + r'.*holding nan'):
    apply(jnp.where(mask, 1.0, jnp.nan))
  with pytest.raises(ValueError, match=REFUSED + r'.*dtype complex64'):   # under jit: the dtype
    jax.jit(apply)(mask.astype(jnp.complex64))
  with pytest.raises(ValueError, match=REFUSED + r'.*int32 mask holding 2'):   # a count
    apply(mask.astype(jnp.int32) * 2)
  jitted = jax.jit(apply)
  np.testing.assert_array_equal(np.asarray(jitted(mask.astype(jnp.float32))),
                                np.asarray(jitted(mask)))
