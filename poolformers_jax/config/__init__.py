"""Configuration: one package, from the config file's words to the config a run saved.

    from poolformers_jax import config as config_lib
    config = config_lib.load('configs/lra_listops.py:ponet,tiny', {'model.dim': 32})
    config = config_lib.complete(config)       # sizes the data decides (vocab_size, ...)
    model = poolformers_jax.models.build_model(config.model)

`load` takes `configs/<task>.py[:words]` or `<task>:words` and dotted-key overrides, checked (an
unknown key names the closest valid ones). The model sizes a dataset decides (`vocab_size`,
`num_classes`, `max_length`, special-token ids) are None in a config file; `complete` fills them
from the dataset's info, as train.py does before building the model.

Its modules:
  defaults.py    `base_config`: every key the trainer reads, with its default; the size words
                 (`SIZES`, `shrink_run`) and the fixed choices of a few keys
  words.py       `parse_words`: the parser of a config file's words (`configs/x.py:ponet,small`)
  lra.py         Long Range Arena (`FAMILIES`, `LraTask`, `task_config`)
  vision.py      the image classifiers (`vision_config`, `vit_model`, `hvt_model`, `deit_recipe`)
  bert.py        PoNet transfer (pre-training, GLUE, long text)
  files.py       `load_file` / `load`: a config file by its name, with checked overrides
  keys.py        `check_keys` (close-key suggestions) and `override`
  completion.py  `complete`: a run's config completed (the run's model on a resume, model sizes
                 from the data); the trainer builds its `Setup` from it
  validate.py    `check_config`: every check of a completed config, up front
  run_file.py    a run's config.json (`save_config`, `load_saved_config`), its `config_hash`,
                 `with_run_model` and `run_config` (its imports run only when trusted)
Configs are numbers and names: nothing here imports flax, optax, orbax, grain or the trainer
(tests/test_layering.py); the package builds on data/'s defaults only.
"""
from __future__ import annotations

from poolformers_jax.config.completion import complete
from poolformers_jax.config.defaults import SIZE_SLOT, SIZES, base_config, shrink_run
from poolformers_jax.config.files import CONFIGS_DIR, load, load_file, resolve, resolved
from poolformers_jax.config.keys import (
                                         ConfigKeyError,
                                         check_keys,
                                         flat_keys,
                                         is_open_key,
                                         override,
                                         override_keys_from_argv,
)
from poolformers_jax.config.run_file import (
                                         ModelMismatch,
                                         UntrustedImports,
                                         config_hash,
                                         load_saved_config,
                                         model_differences,
                                         record_run,
                                         run_config,
                                         save_config,
                                         to_json,
                                         with_run_model,
)
from poolformers_jax.config.validate import ConfigError, check_config
from poolformers_jax.config.words import Numbered, parse_words

__all__ = [
    'CONFIGS_DIR', 'ConfigError', 'ConfigKeyError', 'ModelMismatch', 'Numbered', 'SIZES',
    'SIZE_SLOT', 'UntrustedImports', 'base_config', 'check_config', 'check_keys', 'complete',
    'config_hash', 'flat_keys', 'is_open_key', 'load', 'load_file', 'load_saved_config',
    'model_differences', 'override', 'override_keys_from_argv', 'parse_words', 'record_run',
    'resolve', 'resolved', 'run_config', 'save_config', 'shrink_run', 'to_json', 'with_run_model',
]

