"""Configs from Python, as train.py and eval.py read them.

    from poolformers_jax import config as config_lib
    config = config_lib.load('configs/lra_listops.py:ponet,tiny', {'model.dim': 32})
    config = config_lib.complete(config)       # vocab_size / num_classes / max_length from the data
    model = poolformers_jax.models.build_model(config)

`load` takes the documented name `configs/<task>.py[:words]` (a path relative to the working
directory, else to the repository) and dotted-key overrides (`--config.<key>=<value>` on the
command line), checked: an unknown key fails in one line naming the closest valid ones. The model
sizes a dataset decides (`vocab_size`, `num_classes`, `max_length`, special-token ids) are None in
a config file; `complete` fills them from the dataset's info, as train.py does before building the
model (`build_model` refuses a config left unfilled).
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Mapping, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _path(spec: str) -> tuple[str, str]:
  path, _, words = spec.partition('.py:')
  path = path if path.endswith('.py') else path + '.py'
  if not os.path.exists(path) and not os.path.isabs(path) and os.path.exists(os.path.join(REPO, path)):
    path = os.path.join(REPO, path)
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found: give a config file as configs/<task>.py[:words], '
                            'e.g. configs/lra_listops.py:ponet,tiny')
  return path, words


def load_file(spec: str):
  """'configs/lra_listops.py:ponet,small' -> the file's `get_config('ponet,small')`, unlocked."""
  path, words = _path(spec)
  module_spec = importlib.util.spec_from_file_location('_config_module', path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(words) if words else module.get_config()


def load(spec: str, overrides: Optional[Mapping[str, Any]] = None):
  """The config `spec` names ('configs/<task>.py[:words]'), with `overrides` ({'model.dim': 32,
  ...}) applied and checked; locked, as train.py's --config."""
  from poolformers_jax.train import config_utils
  config = load_file(spec)
  if overrides:
    return config_utils.override(config, **dict(overrides))
  config.lock()
  return config


def complete(config, *, need_files: bool = True):
  """A locked copy of `config` with the model sizes its dataset decides filled in (vocab_size,
  num_classes, max_length, special-token ids), from the dataset's info: what train.py builds the
  model from. need_files=False: from the dataset's constants where its files are missing."""
  from poolformers_jax.train.setup import completed_config
  return completed_config(config, need_files=need_files)[0]
