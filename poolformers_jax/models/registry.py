"""The model registry: `config.model.name` -> constructor. No if/elif chains.

Model files register their constructors with `@register_model('name')` (and are listed in
poolformers_jax/registry.py); a constructor takes the `config.model` ConfigDict and returns an
unbound Flax module, always `Cls(**model_kwargs(cfg, Cls, ...))` (models/block.py): every config
key is a field of the model class, checked in that one place.
`build_model(config)` is the only entry point the trainer, eval, summary and tests use.
"""
from __future__ import annotations

import flax.linen as nn

from poolformers_jax.registry import MODELS, register_model

__all__ = ['MODELS', 'build_model', 'register_model']


def build_model(config) -> nn.Module:
  """Builds `config.model.name` from `config.model` (a ConfigDict or the full config)."""
  model_config = config.model if 'model' in config else config
  return MODELS[model_config.name](model_config)
