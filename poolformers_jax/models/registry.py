"""The one model registry: `config.model.name` -> constructor. No if/elif chains.

Model files register their constructors with `@register_model('name')`; a constructor takes
the `config.model` ConfigDict and returns an unbound Flax module. `build_model(config)` is the
only entry point the trainer, eval, summary and tests use.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import flax.linen as nn

MODELS: dict[str, Callable[[Any], nn.Module]] = {}

# Model files imported on first use (each registers its names), so importing the registry
# stays cheap and free of import cycles.
_MODEL_MODULES = (
    'poolformers_jax.models.encoder',
    'poolformers_jax.models.lm',
    'poolformers_jax.models.vit',
    'poolformers_jax.models.swin',
    'poolformers_jax.models.convnet',
    'poolformers_jax.models.msac_models',
    'poolformers_jax.models.ponet_mlm',
    'poolformers_jax.models.seq2seq',
)


def register_model(name: str):
  def wrap(fn):
    if name in MODELS:
      raise ValueError(f'model {name!r} is registered twice.')
    MODELS[name] = fn
    return fn
  return wrap


def _import_all() -> None:
  for module in _MODEL_MODULES:
    importlib.import_module(module)


def build_model(config) -> nn.Module:
  """Builds `config.model.name` from `config.model` (a ConfigDict or the full config)."""
  _import_all()
  model_config = config.model if 'model' in config else config
  name = model_config.name
  if name not in MODELS:
    raise ValueError(f'unknown model {name!r}; choose one of {sorted(MODELS)}.')
  return MODELS[name](model_config)
