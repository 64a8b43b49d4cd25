"""The model registry: `config.model.name` -> constructor.

Model files register constructors with `@register_model('name')`: `config.model` -> an unbound
Flax module, always `Cls(**model_kwargs(cfg, Cls, ...))` (models/block.py), so every config key
is a checked field of the model class; a model that needs nothing more calls
`register_model_class('name', Cls)`. Everything builds models with `build_model(config.model)`.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn

from poolformers_jax.models.block import model_kwargs
from poolformers_jax.registry import MODELS, register_model

__all__ = ['MODELS', 'build_model', 'register_model', 'register_model_class']


def register_model_class(name: str, cls: type) -> type:
  """Registers model `name` with the constructor `cfg -> cls(**model_kwargs(cfg, cls))`."""
  def constructor(cfg) -> nn.Module:
    return cls(**model_kwargs(cfg, cls))
  # Named after the class (a re-imported model file registers the same model again) and
  # annotated with it (docs/api.md's check reads the class from the return annotation).
  constructor.__module__, constructor.__qualname__ = cls.__module__, f'{cls.__qualname__}.build'
  constructor.__name__, constructor.__annotations__ = 'build', {'cfg': Any, 'return': cls}
  register_model(name, constructor)
  return cls


def build_model(model_config) -> nn.Module:
  """Builds `model_config.name` from `model_config`: a run config's `config.model`."""
  if 'name' not in model_config:
    raise ValueError(f'build_model takes config.model (a model config with a name); got one with '
                     f'keys {sorted(model_config.keys())[:6]}: pass config.model')
  return MODELS[model_config.name](model_config)
