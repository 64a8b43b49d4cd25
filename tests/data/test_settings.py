"""Each dataset's typed settings (`data.settings(config.data)`): the config's defaults are the
settings' own, a run's values carry over, a key the dataset does not have is refused in one line
before anything is built, and a config saved before a key existed reads as its default."""
import dataclasses

import ml_collections
import pytest

from poolformers_jax import config as config_lib, data
from poolformers_jax.data import listops


@pytest.mark.parametrize('name', sorted(data.DATASETS))
def test_the_config_defaults_are_the_settings_defaults(name):
  defaults = data.DATASETS[name].defaults()
  settings = data.settings(data.get_data_config(name))
  assert settings == defaults and settings.name == name
  assert data.get_data_config(name).to_dict() == dataclasses.asdict(defaults)
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.max_length = 1   # type: ignore[misc]


def test_a_runs_values_carry_over(make_data_config):
  config = make_data_config('listops', max_length=64, tokenizer='alphanumeric')
  config.data.generator.num_train = 7
  settings = data.settings(config.data)
  assert isinstance(settings, listops.ListOpsSettings)
  assert (settings.max_length, settings.tokenizer) == (64, 'alphanumeric')
  assert settings.generator == {**listops.GENERATOR_DEFAULTS, 'num_train': 7}


def test_a_key_the_dataset_lacks_is_refused_in_one_line_before_completion(make_data_config):
  config = make_data_config('listops')
  config.data.image_size = 32   # a vision setting
  with pytest.raises(config_lib.ConfigKeyError) as error:
    data.settings(config.data)
  message = str(error.value)
  assert '\n' not in message and message.startswith(
      "config.data.image_size is not a setting of dataset 'listops'; remove it")
  run = config_lib.load('configs/lra_listops.py:transformer,tiny')
  with run.unlocked():
    run.data.image_size = 32
  with pytest.raises(config_lib.ConfigKeyError, match='config.data.image_size'):
    config_lib.complete(run, need_files=False)


def test_a_config_saved_before_a_key_existed_reads_its_default():
  saved = data.get_data_config('listops').to_dict()
  del saved['tokenizer'], saved['skip_bad_records']
  settings = data.settings(ml_collections.ConfigDict(saved))
  assert (settings.tokenizer, settings.skip_bad_records) == ('brackets', False)
