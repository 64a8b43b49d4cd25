"""ContextPool Table 3's ConvNet (CIFAR-10: 0.66M parameters, 3.7 GFLOPs): what its two numbers
allow, counted with the summary tool's MAC counter, and CIFAR-10 as the ConvNets' default."""
import jax
import jax.numpy as jnp
from test_cifar_configs import cifar, completed

from poolformers_jax.models import build_model
from poolformers_jax.summary import forward_macs


def _counts(config, size):
  model = build_model(config.model)
  spec = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
  shapes = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), spec)['params']
  params = sum(int(a.size) for a in jax.tree_util.tree_leaves(shapes))
  return params, forward_macs(model, spec)


def test_convnets_default_to_cifar10_and_hvt_to_cifar100():
  for name in cifar.CONVNETS:
    config = completed(cifar.get_config(name))
    assert config.data.name == 'cifar10' and config.model.num_classes == 10, name
  assert cifar.get_config('hvt_s_4').data.name == 'cifar100'


def test_table3_compute_is_impossible_at_32_and_fits_at_160():
  config = completed(cifar.get_config('convnet_max'))
  params, macs = _counts(config, 32)
  # Every weight is used at most once per position of a 32 x 32 map: MACs <= params * 32^2.
  assert macs <= params * 32 * 32
  assert 0.66e6 * 32 * 32 * 5 < 3.7e9           # so Table 3's 3.7 G needs larger images
  assert abs(macs / 0.086e9 - 1) < 0.01
  # One reading that fits both numbers (module docstring): 160^2 input, widths (80, 136, 136).
  with config.unlocked():
    config.model.widths = (80, 136, 136)
  params, macs = _counts(config, 160)
  assert abs(params / 0.66e6 - 1) < 0.01 and abs(macs / 3.7e9 - 1) < 0.02
