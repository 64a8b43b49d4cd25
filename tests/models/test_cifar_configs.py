"""configs/cifar.py ConvNet entries: build by name, locked, sized like ContextPool Table 3."""
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import config as config_lib
from poolformers_jax.models import build_model

_spec = importlib.util.spec_from_file_location(
    'cifar_config', pathlib.Path(__file__).parents[2] / 'configs' / 'cifar.py')
cifar = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cifar)


def completed(config):
  """`config` completed from the dataset's constants (num_classes), as a run completes it."""
  return config_lib.complete(config, need_files=False)


def _params(config):
  model = build_model(config.model)
  x = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
  shapes = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), x)['params']
  return sum(int(np.prod(s.shape)) for s in jax.tree_util.tree_leaves(shapes))


@pytest.mark.parametrize('data_name,classes', [('cifar10', 10), ('cifar100', 100)])
def test_convnet_configs_build_locked_with_table3_sizes(data_name, classes):
  sizes = {}
  for name in cifar.CONVNETS:
    config = completed(cifar.get_config(f'{name},{data_name}'))   # classes from the data
    assert config.model.num_classes == classes and config.data.image_size == 32
    assert config.label_smoothing == 0.0 and config.optimizer.learning_rate == 2e-3
    with pytest.raises(AttributeError):
      config.model.not_a_field = 1
    sizes[name] = _params(config)
  head = 193 * classes  # Dense(192 -> classes) with bias
  # Table 3 (CIFAR-10): the max-pool ConvNet has 0.66M parameters, ContextPool adds 0.02M.
  assert abs((sizes['convnet_max'] - head + 1930) / 0.66e6 - 1) < 0.02
  assert sizes['convnet_max'] == sizes['convnet_avg']
  assert 0.015e6 < sizes['cp_convnet'] - sizes['convnet_max'] < 0.035e6
