"""The summary tool counts parameters without the dataset: sizes from the dataset's constants."""
import importlib.util
import math
import os
import zipfile

import jax
import ml_collections
import pytest

from poolformers_jax import config as config_lib, data
from poolformers_jax.models import build_model
from poolformers_jax.trainer import step
from poolformers_jax.trainer.setup import setup_with_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config_module(name):
  spec = importlib.util.spec_from_file_location(f'cfg_{name}', os.path.join(ROOT, 'configs',
                                                                            f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_enwik8_cp_transformer_l12_inputs_and_parameters_without_enwik8_zip(tmp_path):
  config = _config_module('enwik8').get_config('cp_transformer_l12')
  with config.unlocked():
    config.data.data_dir = str(tmp_path)                  # no enwik8.zip there
  with pytest.raises(data.DataNotFoundError):             # training still needs the file
    data.get_dataset_info(data.settings(config.data))
  length = config.data.max_length                         # 2048 in stage 1
  config, setup = setup_with_config(config_lib.override(config, batch_size=2, num_devices=1),
                                    need_files=False)
  inputs = step.batch_spec(setup)['inputs']               # what summary compiles the step for
  assert (inputs.shape, inputs.dtype) == ((2, length), 'int32')
  assert config.model.vocab_size == 257                   # 256 bytes + padding id 0
  model = build_model(config.model)
  one = jax.ShapeDtypeStruct((1, length), 'int32')
  shapes = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), one)['params']
  params = sum(math.prod(p.shape) for p in jax.tree_util.tree_leaves(shapes))
  assert round(params / 1e6, 2) == 39.15                  # configs/enwik8.py's documented size
  for name in ('lra_text', 'lra_retrieval', 'lra_image', 'lra_pathfinder'):
    lra = _config_module(name).get_config('tiny')
    with lra.unlocked():
      for key in ('data_dir', 'tsv_dir', 'pathfinder_dir'):
        if key in lra.data:
          lra.data[key] = str(tmp_path)
    info = data.get_dataset_info(data.settings(lra.data), need_files=False)
    assert info.vocab_size == 257 and info.input_shape[-1] == lra.data.max_length


def test_lm_sizes_from_constants_equal_the_files(tmp_path):
  config = ml_collections.ConfigDict()
  config.data = data.get_data_config('text8')
  config.data.update(data_dir=str(tmp_path), max_length=7, split_sizes=(300, 50, 51))
  with zipfile.ZipFile(tmp_path / 'text8.zip', 'w') as archive:
    archive.writestr('text8', 'hello world ' * 40)
  from_files = data.get_dataset_info(data.settings(config.data))
  from_constants = data.DATASETS['text8'].shapes(data.settings(config.data))
  assert from_files == from_constants
  assert from_files.split_sizes == {'train': 42, 'validation': 7, 'test': 7}
