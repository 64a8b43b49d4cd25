"""`python -m poolformers_jax.convert`: official PyTorch weights -> our orbax checkpoint.

The fixtures in tests/models/fixtures/ were made ONCE with the official code (recipe in
docs/results/official_weights.md): a random tiny timm DeiT (`VisionTransformer` as
`deit_tiny_patch16_224` builds it, at 16^2 / patch 4 / dim 8 / 2 heads / depth 2 / 5 classes)
and a random tiny model of the official HVT `models.py` (16^2 / patch 2 / dim 8 / 2 heads /
2 blocks / 2 pooling stages), every parameter random, each with an input batch and the logits
PyTorch computed. No torch here: the converted checkpoint, restored the way eval.py restores it,
must give the same logits to 1e-4.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file
from test_vit import load_config

from poolformers_jax import convert as convert_lib
from poolformers_jax.data.base import DatasetInfo
from poolformers_jax.models import build_model
from poolformers_jax.trainer import (
  checkpoint as checkpoint_lib,
  optim,
  setup as setup_lib,
  sharding,
)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures')
TINY = dict(hidden_dim=8, depth=2, num_heads=2, num_classes=5, image_size=16)
CASES = {
    # name: (config file arg, overrides, fixture, input / logits keys)
    'deit': ('deit_ti', dict(TINY, patch_size=4), 'timm_deit_tiny.safetensors'),
    'hvt': ('hvt_ti_1', dict(TINY, patch_size=2, num_stages=2), 'hvt_tiny.safetensors'),
}


def tiny_config(case, **more):
  arg, overrides, _ = CASES[case]
  config = load_config('imagenet', arg)
  with config.unlocked():
    for key, value in {**overrides, **more}.items():
      config.model[key] = value
  return config


def restore_like_eval(config, workdir):
  """What eval.py does after make_setup: the abstract sharded state, then restore 'latest'."""
  model = build_model(config.model)
  mesh = sharding.make_mesh(-1)
  info = DatasetInfo('official', 'classification', model.num_classes, None, model.input_shape(),
                     {})
  tx = optim.make_optimizer(setup_lib.optimizer_settings(config))
  abstract, _ = setup_lib.state_shardings(model, tx, info, mesh)
  checkpointer = checkpoint_lib.Checkpointer(str(workdir), read_only=True)
  state, step = checkpointer.restore_state('latest', abstract)
  checkpointer.close()
  return model, state, step


@pytest.mark.parametrize('case', sorted(CASES))
def test_official_logits_reproduced_through_the_checkpoint(case, tmp_path):
  io = load_file(os.path.join(FIXTURES, 'official_io.safetensors'))
  config = tiny_config(case)
  path = convert_lib.convert(config, os.path.join(FIXTURES, CASES[case][2]), str(tmp_path))
  assert path == os.path.join(str(tmp_path), 'checkpoints', '0')
  model, state, step = restore_like_eval(config, tmp_path)
  assert int(step) == 0 and int(state.step) == 0
  images = jnp.asarray(io[f'{case}_input_nchw'].transpose(0, 2, 3, 1))   # NCHW -> NHWC
  logits = jax.jit(model.apply)({'params': state.params}, images)
  np.testing.assert_allclose(np.asarray(logits), io[f'{case}_logits'], atol=1e-4, rtol=0)
  # The reference is not trivially matched: its logits are far from zero and differ per class.
  reference = io[f'{case}_logits']
  assert np.abs(reference).max() > 0.5 and np.ptp(reference, axis=1).min() > 0.1


def test_qkv_split_order_matters():
  """Swapping query and key (a plausible mapping bug) moves the DeiT logits well past 1e-4."""
  io = load_file(os.path.join(FIXTURES, 'official_io.safetensors'))
  config = tiny_config('deit')
  state_dict = load_file(os.path.join(FIXTURES, CASES['deit'][2]))
  model, params = convert_lib.model_params_of(config, state_dict)
  images = jnp.asarray(io['deit_input_nchw'].transpose(0, 2, 3, 1))
  apply = jax.jit(model.apply)
  good = np.asarray(apply({'params': params}, images))
  np.testing.assert_allclose(good, io['deit_logits'], atol=1e-4, rtol=0)
  swapped = jax.tree.map(lambda a: a, params)
  attention = swapped['block0']['MultiHeadAttention_0']
  attention['query'], attention['key'] = attention['key'], attention['query']
  bad = np.asarray(apply({'params': swapped}, images))
  assert np.abs(bad - io['deit_logits']).max() > 1e-2


def test_mismatched_config_fails_with_one_line(tmp_path):
  source = os.path.join(FIXTURES, CASES['hvt'][2])
  with pytest.raises(convert_lib.ConversionError, match=r"tensors with no parameter \['blocks.1"):
    convert_lib.convert(tiny_config('hvt', depth=1, num_stages=1), source, str(tmp_path))
  with pytest.raises(convert_lib.ConversionError,
                     match=r'head.weight: shape \(8, 5\).*head/kernel \(8, 7\)'):
    convert_lib.convert(tiny_config('hvt', num_classes=7), source, str(tmp_path))
  with pytest.raises(convert_lib.ConversionError, match='unknown checkpoint format'):
    convert_lib.read_state_dict(__file__)
  assert not os.path.exists(os.path.join(str(tmp_path), 'checkpoints'))
