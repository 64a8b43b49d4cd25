"""Helpers for the trainer tests (imported by name: a module called conftest would collide with
tests/data/conftest.py): tiny ListOps configs on a session-wide generated dataset.

The persistent compilation cache lets the many short runs of the same tiny model reuse XLA
executables across tests (it changes no numbers).
"""
import os
import sys

import jax

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'configs'))

import lra_listops  # noqa: E402
from poolformers_jax import config as config_lib  # noqa: E402

jax.config.update('jax_compilation_cache_dir', os.path.join(REPO, '.pytest_cache', 'jax_cache'))
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)
jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)


def tiny_overrides(data_dir: str, **updates) -> dict:
  """A seconds-long ListOps run: 16-wide 1-layer model, 32-token trees, 8-example batches."""
  base = {
      'data.data_dir': data_dir,
      'data.generator.num_train': 64, 'data.generator.num_validation': 20,
      'data.generator.num_test': 20, 'data.generator.min_tokens': 5,
      'data.generator.max_tokens': 30, 'data.max_length': 32,
      'model.dim': 16, 'model.mlp_dim': 16, 'model.head_hidden_dim': 16, 'model.num_layers': 1,
      'batch_size': 8, 'eval_batch_size': 8, 'num_train_steps': 3,
      'optimizer.learning_rate': 3e-3, 'optimizer.warmup_steps': 1,
      'log_every_steps': 1, 'eval_every_steps': 3, 'checkpoint_every_steps': 3,
      'progress_bar': False,
  }
  base.update(updates)
  return base


def tiny_config(data_dir: str, family: str = 'transformer', **updates):
  return config_lib.override(lra_listops.get_config(f'{family},tiny'),
                               **tiny_overrides(data_dir, **updates))
