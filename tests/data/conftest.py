"""Shared fixtures for the data tests: a run config around one dataset, a tiny generated ListOps."""
import ml_collections
import pytest

from poolformers_jax import data


def data_config(name, **data_fields):
  """A run config (seed 0, batch 4) holding dataset `name`'s data config with `data_fields` set."""
  config = ml_collections.ConfigDict()
  config.seed, config.batch_size = 0, 4
  config.data = data.get_data_config(name)
  config.data.update(data_fields)
  return config


@pytest.fixture(scope='session')
def make_data_config():
  """`data_config` above."""
  return data_config


def listops_config(data_dir, *, seed=0, num_train=60, num_validation=11, num_test=13,
                   min_tokens=10, max_tokens=60, max_length=64, batch_size=8):
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.batch_size = batch_size
  config.data = data.get_data_config('listops')
  config.data.data_dir = str(data_dir)
  config.data.max_length = max_length
  config.data.generator.update(seed=seed, min_tokens=min_tokens, max_tokens=max_tokens,
                               num_train=num_train, num_validation=num_validation,
                               num_test=num_test)
  return config


@pytest.fixture(scope='session')
def small_listops(tmp_path_factory):
  """A generated ListOps config (prepared once per session)."""
  return listops_config(tmp_path_factory.mktemp('listops'))


@pytest.fixture(scope='session')
def make_listops_config():
  """The factory above, for tests that need their own parameters."""
  return listops_config
