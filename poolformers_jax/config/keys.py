"""Config keys: close-key suggestions for a misspelled key, and checked dotted-key overrides.

ml_collections' error for an unknown key is a traceback without a hint; `check_keys` names the
closest valid keys (difflib). --config.<key> flags, `config.load`'s overrides and reproduce's --set
all go through it.
"""
from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable
from typing import Any

import ml_collections

from poolformers_jax.errors import ConfigKeyError


def flat_keys(config: ml_collections.ConfigDict, prefix: str = '') -> list[str]:
  """All dotted keys of `config`, nested ConfigDicts included ('model', 'model.dim', ...)."""
  keys = []
  for key, value in config.items():
    path = f'{prefix}{key}'
    keys.append(path)
    if isinstance(value, ml_collections.ConfigDict):
      keys.extend(flat_keys(value, path + '.'))
  return keys


def _has_key(config: ml_collections.ConfigDict, dotted: str) -> bool:
  node: Any = config
  for part in dotted.split('.'):
    if isinstance(node, (ml_collections.ConfigDict, dict)) and part in node:
      node = node[part]
    else:
      return False
  return True


def is_open_key(dotted: str) -> bool:
  """A key of a `*_kwargs` dict (model.mixer_kwargs: the mixer's own arguments, whichever mixer
  the run names), which an override may add as well as change."""
  return '.' in dotted and dotted.rsplit('.', 1)[0].endswith('_kwargs')


def _is_open_dict(config: ml_collections.ConfigDict, dotted: str) -> bool:
  """Keys under a `*_kwargs` dict or an unlocked sub-dict may be added freely."""
  parent = dotted.rsplit('.', 1)[0] if '.' in dotted else ''
  node: Any = config
  for part in filter(None, parent.split('.')):
    if part not in node:
      return False
    node = node[part]
  return (isinstance(node, ml_collections.ConfigDict) and node is not config
          and (not node.is_locked or is_open_key(dotted)))


def check_keys(config: ml_collections.ConfigDict, keys: Iterable[str]) -> None:
  """Raises ConfigKeyError naming every unknown key and the closest valid keys."""
  valid = flat_keys(config)
  for key in keys:
    if _has_key(config, key) or _is_open_dict(config, key):
      continue
    parent, _, leaf = key.rpartition('.')
    leaf_of = lambda k: k.rpartition('.')[2]
    siblings = [v for v in valid if v.rpartition('.')[0] == parent]
    # The same name under another parent first, then near spellings ('model.dmi' -> 'model.dim').
    close = [v for v in valid if leaf_of(v) == leaf]
    close += [f'{parent}.{m}' if parent else m for m in
              difflib.get_close_matches(leaf, [leaf_of(v) for v in siblings], n=3, cutoff=0.6)]
    if not close:  # a right leaf name under the wrong parent: 'num_heads' -> 'model.num_heads'
      names = difflib.get_close_matches(leaf, [leaf_of(v) for v in valid], n=3, cutoff=0.8)
      close = [v for v in valid if leaf_of(v) in names]
    hint = f'did you mean {", ".join(close)}?' if close else 'see the config file for valid keys.'
    raise ConfigKeyError(f'unknown config key {key!r}; {hint}')


def override_keys_from_argv(argv: Iterable[str], flag_name: str = 'config') -> list[str]:
  """The dotted keys of `--config.a.b=v` / `--config.a.b v` command-line overrides."""
  keys = []
  prefix = f'--{flag_name}.'
  for arg in argv:
    if arg.startswith(prefix):
      keys.append(arg[len(prefix):].split('=', 1)[0])
  return keys


def override(config: ml_collections.ConfigDict, **updates: Any) -> ml_collections.ConfigDict:
  """Returns a copy with dotted-key updates (`override(c, **{'model.dim': 32})`), checked.
  Fields computed from others (FieldReferences, e.g. glue.py's steps from epochs and batch size)
  stay linked in the copy, as on the command line."""
  check_keys(config, updates)
  config = ml_collections.ConfigDict(copy.deepcopy(config), type_safe=False)
  config.unlock()   # the copy's sub-dicts too: the keys were checked above
  config.update_from_flattened_dict(updates)
  config.lock()
  return config
