"""Completing a config: where a run's config becomes the config it runs (`complete`). The
modules `config.imports` names are imported first (their mixers and models registered). The
trainer's `setup_with_config` completes through `complete_with_info`, which also returns the
dataset's typed settings (`data.settings(config.data)`, made here once) and the DatasetInfo read.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import ml_collections

from poolformers_jax import data, registry
from poolformers_jax.config import run_file


def _fill_model_sizes(config: ml_collections.ConfigDict, info) -> None:
  """Fills model.vocab_size / max_length / num_classes left unset, from the DatasetInfo."""
  derived = {'vocab_size': info.vocab_size, 'num_classes': info.num_classes,
             'max_length': info.input_shape[-1] if info.vocab_size is not None else None,
             **info.model_defaults}
  with config.unlocked():
    for key, value in derived.items():
      if key in config.model and config.model[key] is None and value is not None:
        config.model[key] = value


def steps_from_epochs(config: ml_collections.ConfigDict, info) -> None:
  """config.num_train_epochs > 0: num_train_steps = ceil(epochs x training examples / batch_size)
  (the examples of the dataset's info; a ValueError if it does not know them)."""
  epochs = config.get('num_train_epochs', 0)
  if not epochs:
    return
  examples = info.split_sizes.get('train')
  if not examples:
    raise ValueError(f'config.num_train_epochs={epochs} needs the size of the training split, '
                     f'which {info.name} does not know here (its files are missing?); set '
                     'config.num_train_steps instead.')
  with config.unlocked():
    config.num_train_steps = math.ceil(epochs * examples / config.batch_size)


def complete(config: ml_collections.ConfigDict, *, need_files: bool = True,
             info: Any | None = None, run_dir: str | None = None,
             todo: str = '') -> ml_collections.ConfigDict:
  """A locked copy of `config` with the model sizes its dataset decides filled in (vocab_size,
  num_classes, max_length, special-token ids) from the dataset's info: what train.py builds the
  model from. need_files=False: sizes from the dataset's constants where its files are missing;
  `info`: this DatasetInfo instead of the dataset's (a benchmark that makes its own batches);
  `run_dir`: a run directory this config continues (a resume): its model is the run's
  (`run_file.with_run_model`; `todo` says what to do about a different one)."""
  return complete_with_info(config, need_files=need_files, info=info, run_dir=run_dir,
                            todo=todo)[0]


def complete_with_info(config: ml_collections.ConfigDict, *, need_files: bool = True,
                       info: Any | None = None, run_dir: str | None = None, todo: str = ''
                       ) -> tuple[ml_collections.ConfigDict, data.DataSettings, Any]:
  """(`complete`'s config, its dataset's settings, the DatasetInfo it was completed from)."""
  if run_dir is not None:
    config = (run_file.with_run_model(config, run_dir, todo=todo) if todo
              else run_file.with_run_model(config, run_dir))
  registry.import_modules(config.get('imports', ''))   # the user's mixers / models, registered
  settings = data.settings(config.data)   # a key the dataset does not have: refused here
  info = info or data.get_dataset_info(settings, need_files=need_files)
  config = copy.deepcopy(config)   # the caller's config is left untouched
  _fill_model_sizes(config, info)
  steps_from_epochs(config, info)
  config.lock()
  return config, settings, info
