"""A run's config.json: writing it, reading it back, its hash (`config_hash`, what a checkpoint
records), `with_run_model` (a command that reads a run
directory uses the run's own model) and `run_config` (it imports the modules the run's
config.json names only when trusted: a run directory runs no code unasked)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from typing import Any

import ml_collections

from poolformers_jax import registry
from poolformers_jax.config.keys import override


def to_json(config: ml_collections.ConfigDict) -> str:
  return config.to_json_best_effort(indent=2, sort_keys=True)


def config_hash(config: ml_collections.ConfigDict | None) -> str:
  """The sha256 of the config's keys and values, which every checkpoint of the run records."""
  text = json.dumps(config.to_dict(), sort_keys=True, default=str) if config is not None else ''
  return hashlib.sha256(text.encode()).hexdigest()


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


class UntrustedImports(ValueError):
  """A run's config.json names modules to import that nothing else asked for."""


def imported_modules(config: ml_collections.ConfigDict) -> list[str]:
  """The module names of `config.imports` ('a,b.c')."""
  return [n.strip() for n in str(config.get('imports') or '').split(',') if n.strip()]


def run_config(workdir: str, *, trust_imports: bool = False) -> ml_collections.ConfigDict:
  """The config a run saved (DIR/config.json) as the config a command runs. A run directory runs
  no code unasked: modules its `config.imports` names that are not imported yet (importing an
  imported module runs nothing) are refused, naming them, unless `trust_imports`
  (the programs' --trust_imports); a command whose own --config names them (--config.imports)
  imports them itself and does not come here."""
  config = load_saved_config(workdir)
  untrusted = [name for name in imported_modules(config) if name not in sys.modules]
  if untrusted and not trust_imports:
    raise UntrustedImports(
        f'{os.path.join(workdir, "config.json")} names modules to import, {untrusted} '
        '(config.imports), that this command did not: a run directory runs no code unasked; '
        'pass --trust_imports if you trust this run (load_run(..., trust_imports=True) in '
        'Python), or import them yourself (--config with --config.imports=...; in Python, '
        'import them first)')
  return config


class ModelMismatch(ValueError):
  """A --config whose model differs from the run's it reads; the message names the keys."""


def _flat_model(model: Any) -> dict[str, Any]:
  """config.model as {dotted key: JSON value} (tuples as lists, as the run's config.json)."""
  as_json = json.loads(to_json(model)) if isinstance(model, ml_collections.ConfigDict) else model
  return _flatten(as_json) if isinstance(as_json, dict) else as_json


def _flatten(tree: dict[str, Any], prefix: str = '') -> dict[str, Any]:
  """{'a': {'b': 1}, 'c': {}} -> {'a.b': 1} (empty dicts dropped, as flax.traverse_util's)."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def _built_fields(model: Any) -> dict[str, Any]:
  """The top-level fields of the module a run's config.model builds, as JSON values (what a key
  added after the run was when it trained); {} if the model cannot be built here."""
  try:
    config = (model if isinstance(model, ml_collections.ConfigDict)
              else ml_collections.ConfigDict(model))
    module = registry.MODELS[config.name](config)   # imports the model files
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
  run's. Keys the --config leaves None and dropout rates (`*_rate`) may differ; a key the run's
  config.json lacks is its module's default."""
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
      if key in built:
        if built[key] != mine:
          out.append(f'model.{key} {text(mine)} (run: absent, i.e. {text(built[key])})')
        continue
    out.append(f'model.{key} {text(mine)} (run: {text(saved)})')
  return out


def with_run_model(config: ml_collections.ConfigDict | None, workdir: str, *,
                   todo: str = 'leave --config out (the run\'s own config is used) or give the '
                   'config it was trained with',
                   trust_imports: bool = False) -> ml_collections.ConfigDict:
  """The model of a command that reads a run directory (eval.py, convert --to hf, average, a
  resumed run) is the run's: `config` None -> the run's config (`run_config`: its imports need
  `trust_imports`); a `config` whose model differs -> ModelMismatch; else `config` with its unset
  model keys filled from the run (its own imports, not the run's). A directory without
  config.json leaves `config` as it is."""
  if not os.path.exists(os.path.join(workdir, 'config.json')):
    if config is None:
      load_saved_config(workdir)   # raises: nothing says what the model is
    return config
  if config is None:
    return run_config(workdir, trust_imports=trust_imports)
  run = load_saved_config(workdir)
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


def record_run(config: ml_collections.ConfigDict, workdir: str, *, write: bool = True) -> str:
  """The config's hash, which the run's checkpoints carry (`config_hash`), after config.json is
  written to `workdir` where `write` (process 0 of a run)."""
  if write:
    save_config(config, workdir)
  return config_hash(config)
