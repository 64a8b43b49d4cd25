"""Config files by their documented name, `configs/<task>.py[:<word>,<word>,...]`: the file's
`get_config(words)` (words: config/words.py), with checked dotted-key overrides."""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Mapping, Optional

from poolformers_jax.config.keys import override

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
  config = load_file(spec)
  if overrides:
    return override(config, **dict(overrides))
  config.lock()
  return config
