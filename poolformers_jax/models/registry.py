"""The model registry: `config.model.name` -> constructor. No if/elif chains.

Model files register their constructors with `@register_model('name')` (and are listed in
poolformers_jax/registry.py); a constructor takes the `config.model` ConfigDict and returns an
unbound Flax module, always `Cls(**model_kwargs(cfg, Cls, ...))` (models/block.py): every config
key is a field of the model class, checked in that one place. A model that needs nothing more
registers its class, `register_model('name', Cls)`, and `build_model` builds it so.
`build_model(config)` is the only entry point the trainer, eval, summary and tests use.
"""
from __future__ import annotations

import flax.linen as nn

from poolformers_jax.models.block import model_kwargs
from poolformers_jax.registry import MODELS, register_model

__all__ = ['MODELS', 'build_model', 'register_model']


def build_model(config) -> nn.Module:
  """Builds `config.model.name` from `config.model` (a ConfigDict or the full config)."""
  model_config = config.model if 'model' in config else config
  constructor = MODELS[model_config.name]
  if isinstance(constructor, type):   # a registered class: Cls(**model_kwargs(cfg, Cls))
    return constructor(**model_kwargs(model_config, constructor))
  return constructor(model_config)
