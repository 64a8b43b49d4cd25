"""Config helpers: close-key suggestions for misspelled keys, overrides, completion from data, JSON.

ml_collections locks the configs, but its error for an unknown key is a traceback without a hint;
here an unknown key fails with one line listing the closest valid keys (difflib): that,
filling model sizes from the dataset and the one rule of commands that read a run directory (its
model is the run's own: `with_run_model`) is all this file adds to ConfigDict (which does the
updates and the JSON).
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
from typing import Any, Iterable, Optional

from flax import traverse_util
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
    if isinstance(node, ml_collections.ConfigDict) and part in node:
      node = node[part]
    elif isinstance(node, dict) and part in node:
      node = node[part]
    else:
      return False
  return True


def _is_open_dict(config: ml_collections.ConfigDict, dotted: str) -> bool:
  """Keys under an unlocked sub-dict (e.g. model.mixer_kwargs) may be added freely."""
  parent = dotted.rsplit('.', 1)[0] if '.' in dotted else ''
  node: Any = config
  for part in filter(None, parent.split('.')):
    if part not in node:
      return False
    node = node[part]
  return isinstance(node, ml_collections.ConfigDict) and not node.is_locked and node is not config


def check_keys(config: ml_collections.ConfigDict, keys: Iterable[str]) -> None:
  """Raises ConfigKeyError naming every unknown key and the closest valid keys."""
  valid = flat_keys(config)
  for key in keys:
    if _has_key(config, key) or _is_open_dict(config, key):
      continue
    parent, _, leaf = key.rpartition('.')
    leaf_of = lambda k: k.rpartition('.')[2]
    siblings = [v for v in valid if v.rpartition('.')[0] == parent]
    # The same name under another parent first ('num_heads' -> 'model.num_heads'), then
    # near spellings among the siblings ('model.dmi' -> 'model.dim').
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
  config.update_from_flattened_dict(updates)
  config.lock()
  return config


def complete_from_dataset(config: ml_collections.ConfigDict, info) -> None:
  """Fills model.vocab_size / max_length / num_classes left unset, from the DatasetInfo."""
  derived = {'vocab_size': info.vocab_size, 'num_classes': info.num_classes,
             'max_length': info.input_shape[-1] if info.vocab_size is not None else None,
             **info.model_defaults}
  with config.unlocked():
    for key, value in derived.items():
      if key in config.model and config.model[key] is None and value is not None:
        config.model[key] = value


def to_json(config: ml_collections.ConfigDict) -> str:
  return config.to_json_best_effort(indent=2, sort_keys=True)


def load_saved_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a train.py run saved as DIR/config.json (locked, as a --config file's)."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found: pass the --workdir of a train.py run (it writes '
                            'config.json there)')
  with open(path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  config.lock()
  return config


class ModelMismatch(ValueError):
  """A --config whose model is not the one of the run it reads (one line names the keys)."""


def _flat_model(model: Any) -> dict[str, Any]:
  """config.model as {dotted key: JSON value} (tuples as lists, as the run's config.json)."""
  as_json = json.loads(to_json(model)) if isinstance(model, ml_collections.ConfigDict) else model
  return traverse_util.flatten_dict(as_json, sep='.')


def _built_fields(model: Any) -> dict[str, Any]:
  """The top-level fields of the module `model` (a run's config.model) builds, as JSON values:
  what a key the run's config.json lacks (an option added after the run) was when it trained.
  {} if the model cannot be built here."""
  from poolformers_jax.models import MODELS   # here: the models import this file's module
  try:
    config = model if isinstance(model, ml_collections.ConfigDict) else ml_collections.ConfigDict(model)
    module = MODELS[config.name](config)
  except Exception:   # an unregistered or unbuildable model: no defaults to offer
    return {}
  fields = {}
  for field in dataclasses.fields(module):
    try:
      fields[field.name] = json.loads(json.dumps(getattr(module, field.name)))
    except (TypeError, ValueError):
      continue
  return fields


def model_differences(given: Any, run: Any) -> list[str]:
  """'model.<key> <given> (run: <value>)' for every key where a --config's model differs from a
  run's. A key the --config leaves unset (None: filled from the data) takes the run's value;
  dropout rates (`*_rate`) only act in training and may differ. A key the run's config.json
  lacks (added to the library after the run) is the value the run's model was built with: its
  module's default."""
  ours, theirs = _flat_model(given), _flat_model(run)
  absent = object()
  text = lambda v: 'absent' if v is absent else json.dumps(v)
  built = None
  out = []
  for key in sorted(set(ours) | set(theirs)):
    mine, saved = ours.get(key, absent), theirs.get(key, absent)
    if mine is None or key.endswith('_rate') or mine == saved:
      continue
    if saved is absent and '.' not in key:
      built = _built_fields(run) if built is None else built
      if key in built and built[key] == mine:
        continue
      if key in built:
        out.append(f'model.{key} {text(mine)} (run: absent, i.e. {text(built[key])})')
        continue
    out.append(f'model.{key} {text(mine)} (run: {text(saved)})')
  return out


def with_run_model(config: Optional[ml_collections.ConfigDict], workdir: str, *,
                   todo: str = 'leave --config out (the run\'s own config is used) or give the '
                   'config it was trained with') -> ml_collections.ConfigDict:
  """THE rule of every command that reads a run directory (eval.py, convert --to hf, average, a
  resumed train.py / reproduce run; translate takes the run's config whole): the model is the
  run's, DIR/config.json.
  `config` None -> the run's config; a `config` whose model differs -> ModelMismatch naming
  every differing key in one line; else `config` with its unset model keys filled from the run.
  A directory without config.json (not a train.py / convert run) leaves `config` as it is."""
  if not os.path.exists(os.path.join(workdir, 'config.json')):
    if config is None:
      load_saved_config(workdir)   # raises: nothing says what the model is
    return config
  run = load_saved_config(workdir)
  if config is None:
    return run
  differences = model_differences(config.model, run.model)
  if differences:
    raise ModelMismatch(f'--config describes another model than the run in {workdir} (its '
                        f'config.json): {", ".join(differences)}; {todo}')
  given = _flat_model(config.model)
  unset = {f'model.{k}': v for k, v in _flat_model(run.model).items() if k in given
           and given[k] is None}
  return override(config, **unset) if unset else config


def save_config(config: ml_collections.ConfigDict, workdir: str) -> str:
  path = os.path.join(workdir, 'config.json')
  os.makedirs(workdir, exist_ok=True)
  with open(path, 'w') as f:
    f.write(to_json(config) + '\n')
  return path
