"""The model registry: a model's name -> its constructor, `fields -> Cls(**model_kwargs(fields,
Cls, ...))` (models/block.py), so every key is a checked field of the model class. Model files
register a class with `register_model_class('name', Cls)`, or a constructor of their own with
`@register_model('name')`; everything builds models with `build_model(name=..., **fields)` or
`build_model(config.model)` (the trainer).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn

from poolformers_jax.models.block import model_kwargs
from poolformers_jax.registry import MODELS, register_model

__all__ = ['MODELS', 'build_model', 'register_model', 'register_model_class']


def register_model_class(name: str, cls: type, *, required: tuple[str, ...] = (),
                         **overrides: Any) -> type:
  """Registers model `name` with the constructor `fields -> cls(**model_kwargs(fields, cls,
  required=required, **overrides))`: the `required` keys must be set, the `overrides` are the
  model's to set."""
  def constructor(fields: Mapping[str, Any]) -> nn.Module:
    return cls(**model_kwargs(fields, cls, required=required, **overrides))
  # Named after the class (a re-imported model file registers the same model again) and
  # annotated with it (docs/api.md's check reads the class from the return annotation).
  constructor.__module__, constructor.__qualname__ = cls.__module__, f'{cls.__qualname__}.build'
  constructor.__name__, constructor.__annotations__ = 'build', {'fields': Any, 'return': cls}
  register_model(name, constructor)
  return cls


def build_model(model_config: Mapping[str, Any] | None = None, /, **fields: Any) -> nn.Module:
  """Builds the registered model `name` from its fields as keyword values
  (`build_model(name='transformer', num_layers=2, ...)`), or from a run config's `config.model`."""
  if model_config is not None:
    fields = {**model_config, **fields}
  if 'name' not in fields:
    raise ValueError(f'build_model takes the model\'s name and fields (name=..., or config.model); '
                     f'got keys {sorted(fields)[:6]}: pass name= or config.model')
  return MODELS[fields['name']](fields)
