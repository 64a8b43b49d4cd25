"""Configs: locked, close-key suggestions (API and command line), every LRA task x family loads."""
import importlib
import os
import subprocess
import sys

import ml_collections
import pytest
from tiny_runs import REPO

from poolformers_jax import config as config_lib
from poolformers_jax.config import lra as lra_base
from poolformers_jax.layers import MIXERS
from poolformers_jax.layers.registry import mixer_fields

TASKS = ('lra_listops', 'lra_text', 'lra_retrieval', 'lra_image', 'lra_pathfinder')


@pytest.mark.parametrize('task', TASKS)
def test_every_task_and_family_builds_a_locked_valid_config(task):
  module = importlib.import_module(task)
  for family, (mixer, _) in lra_base.FAMILIES.items():
    for size in config_lib.SIZES:
      config = module.get_config(f'{family},{size}')
      assert config.is_locked and config.model.mixer == mixer
      assert config.model.name == ('lra_dual_encoder' if task == 'lra_retrieval' else 'lra_encoder')
      assert set(config.model.mixer_kwargs) <= mixer_fields(MIXERS[mixer])
      assert config.batch_size % 8 == 0 and config.eval_batch_size % 8 == 0
      with pytest.raises(AttributeError):
        config.model.not_a_key = 1


def test_default_listops_is_the_small_transformer():
  import lra_listops
  default, paper = lra_listops.get_config(), lra_listops.get_config('transformer')
  assert default.model.mixer == 'softmax'
  assert default.data.max_length < paper.data.max_length == 2048
  assert (paper.model.dim, paper.model.num_layers, paper.model.mlp_dim) == (64, 2, 128)
  assert (paper.batch_size, paper.num_train_steps, paper.optimizer.warmup_steps) == (32, 5000, 1000)


def test_bad_argument_lists_the_choices():
  with pytest.raises(ValueError, match=r"'pnoet' is not a model family .*'ponet'.*, a "
                                       r"protocol \['ours', 'reference'\], a stage "
                                       r"\['spt', 'spt_causal', 'finetune', 'finetune_causal'\], "
                                       r"a model size \['6x512'\], a positions word"):
    lra_base.parse_arg('pnoet,small')


def test_adamra_words_set_rates_subheads_and_mixer_dropout():
  import lra_listops
  plain = lra_listops.get_config('adamra,small')
  worded = lra_listops.get_config('adamra,small,rates4-8-16-32,subheads4,mixer_dropout0')
  assert tuple(worded.model.mixer_kwargs.compression_rates) == (0.25, 0.125, 0.0625, 0.03125)
  assert (worded.model.num_heads, worded.model.attention_dropout_rate) == (4, 0.0)
  assert (plain.model.num_heads, plain.model.attention_dropout_rate) == (2, 0.1)
  # The default's words give the default model: AdaMRA's own rates, 2 subheads, 10 %.
  from poolformers_jax.layers.adamra import AdaMRA
  same = lra_listops.get_config('adamra,small,rates2-8-32,subheads2,mixer_dropout10')
  assert tuple(same.model.mixer_kwargs.compression_rates) == tuple(AdaMRA.compression_rates)
  assert same.model.num_heads == 2 and same.model.attention_dropout_rate == 0.1
  assert lra_listops.get_config('ponet,mixer_dropout5').model.attention_dropout_rate == 0.05
  for arg, words in (('ponet,rates2-8', ["'rates2-8'", 'adamra']),
                     ('transformer,subheads4', ["'subheads4'", 'adamra']),
                     ('adamra,mixer_dropout100', ['percent']), ('adamra,rates0-8', ["'rates0-8'"])):
    with pytest.raises(ValueError) as error:
      lra_listops.get_config(arg)
    assert '\n' not in str(error.value) and all(w in str(error.value) for w in words)


def test_unknown_key_names_close_valid_keys():
  import lra_listops
  config = lra_listops.get_config()
  with pytest.raises(config_lib.ConfigKeyError,
                     match=r"unknown config key 'model.dmi'; did you mean model.dim\?"):
    config_lib.override(config, **{'model.dmi': 32})
  with pytest.raises(config_lib.ConfigKeyError, match=r'optimizer.learning_rate'):
    config_lib.check_keys(config, ['optimizer.learnig_rate'])
  with pytest.raises(config_lib.ConfigKeyError, match=r'did you mean model.num_heads'):
    config_lib.check_keys(config, ['num_heads'])          # right name, wrong parent
  config_lib.check_keys(lra_listops.get_config('ponet'),
                          ['model.mixer_kwargs.segment_num', 'batch_size'])   # real keys pass
  changed = config_lib.override(config, **{'model.dim': 32})
  assert changed.model.dim == 32 and config.model.dim == 64 and changed.is_locked


def test_command_line_typo_exits_with_one_line_naming_close_keys(tmp_path):
  proc = subprocess.run(
      [sys.executable, 'train.py', '--config', 'configs/lra_listops.py:tiny',
       '--workdir', str(tmp_path), '--config.optimizer.learnig_rate=0.1'],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 2
  assert ("unknown config key 'optimizer.learnig_rate'; did you mean optimizer.learning_rate?"
          in proc.stderr)
  assert 'Traceback' not in proc.stderr


def test_config_is_completed_from_the_dataset_and_saved_as_json(tmp_path):
  import json

  import lra_listops

  from poolformers_jax.data import DatasetInfo
  config = lra_listops.get_config()
  info = DatasetInfo('listops', 'classification', 10, 18, (128,), {'train': 1})
  config = config_lib.complete(config, info=info)
  model = config.model
  assert (model.vocab_size, model.num_classes, model.max_length) == (18, 10, 128)
  saved = json.load(open(config_lib.save_config(config, str(tmp_path))))
  assert saved == json.loads(config_lib.to_json(config))
  assert ml_collections.ConfigDict(saved).model.vocab_size == 18
