"""Config files by their documented name, `configs/<task>.py[:<word>,<word>,...]`: the file's
`get_config(words)` (words: `parse_words`), with checked dotted-key overrides.

`resolve` reads a path that exists from there; otherwise `configs/<task>.py` and the bare `<task>`
name the config the package ships (configs/ in a checkout, poolformers_jax/configs in a wheel),
so the README's names work from any directory."""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from poolformers_jax.config.keys import override

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SHIPPED = os.path.join(_PACKAGE, 'configs')
CONFIGS_DIR = _SHIPPED if os.path.isdir(_SHIPPED) else os.path.join(os.path.dirname(_PACKAGE),
                                                                    'configs')


def shipped_tasks() -> list[str]:
  """The task names of the shipped configs ('lra_listops', 'wmt14', ...)."""
  return sorted(f[:-3] for f in os.listdir(CONFIGS_DIR) if f.endswith('.py') and f[0] != '_')


def resolve(spec: str) -> tuple[str, str]:
  """'configs/lra_listops.py:ponet,small' (or 'lra_listops:ponet,small') -> (its file,
  'ponet,small')."""
  if '.py:' in spec:
    path, _, words = spec.partition('.py:')
    path += '.py'
  elif ':' in spec and not os.path.exists(spec):
    path, _, words = spec.partition(':')
  else:
    path, words = spec, ''
  path = path if path.endswith('.py') else path + '.py'
  if os.path.isfile(path):
    return path, words
  folder, name = os.path.split(path)
  shipped = os.path.join(CONFIGS_DIR, name)
  if os.path.normpath(folder) in ('.', 'configs') and os.path.isfile(shipped):
    return shipped, words
  raise FileNotFoundError(f'{path} not found: give a config file, or configs/<task>.py[:words] '
                          f'for a shipped one, <task> one of {", ".join(shipped_tasks())} (e.g. '
                          'configs/lra_listops.py:ponet,tiny)')


def resolved(spec: str) -> str:
  """`spec` with its file resolved: 'lra_listops:ponet' -> '/.../configs/lra_listops.py:ponet'."""
  path, words = resolve(spec)
  return f'{os.path.abspath(path)}:{words}' if words else os.path.abspath(path)


def load_file(spec: str):
  """'configs/lra_listops.py:ponet,small' -> the file's `get_config('ponet,small')`, unlocked."""
  path, words = resolve(spec)
  module_spec = importlib.util.spec_from_file_location('_config_module', path)
  assert module_spec is not None and module_spec.loader is not None, path   # a .py file
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(words) if words else module.get_config()


def load(spec: str, overrides: Mapping[str, Any] | None = None):
  """The config `spec` names ('configs/<task>.py[:words]', or '<task>:words'), with `overrides`
  ({'model.dim': 32, ...}) applied and checked; locked, as train.py's --config.

  ```pycon
  >>> from poolformers_jax import config
  >>> c = config.load('lra_listops:ponet,tiny', {'model.dim': 32})
  >>> c.model.mixer, c.model.dim
  ('ponet', 32)
  >>> config.load('lra_listops:ponet,tiny', {'model.dimm': 32})
  Traceback (most recent call last):
  poolformers_jax.errors.ConfigKeyError: unknown config key 'model.dimm'; did you mean model.dim?

  ```
  """
  config = load_file(spec)
  if overrides:
    return override(config, **dict(overrides))
  config.lock()
  return config
