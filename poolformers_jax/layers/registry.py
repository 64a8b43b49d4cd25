"""The one mixer registry: name -> token-mixer class, and `build_mixer` to construct one.

Models never branch on a mixer name; they call `build_mixer(name, num_heads=..., causal=...,
dropout_rate=..., **config_kwargs)`. Shared arguments are passed only to mixers that declare
them as fields, and an unknown keyword fails with the list of valid ones.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn

from poolformers_jax.layers import attention

MIXERS: dict[str, type[nn.Module]] = {
    'softmax': attention.MultiHeadAttention,
    'linear': attention.LinearAttention,
}


def register_mixer(name: str, cls: type[nn.Module]) -> None:
  if name in MIXERS and MIXERS[name] is not cls:
    raise ValueError(f'mixer {name!r} is already registered as {MIXERS[name].__name__}.')
  MIXERS[name] = cls


def mixer_fields(cls: type[nn.Module]) -> set[str]:
  return {f.name for f in dataclasses.fields(cls) if f.name not in ('parent', 'name')}


def build_mixer(name: str, *, shared: dict[str, Any] | None = None, **kwargs: Any) -> nn.Module:
  """Builds mixer `name`. `shared` args (num_heads, causal, ...) go only where they are fields;
  `kwargs` (the config's mixer-specific options) must all be fields of the mixer."""
  if name not in MIXERS:
    raise ValueError(f'unknown mixer {name!r}; choose one of {sorted(MIXERS)}.')
  cls = MIXERS[name]
  fields = mixer_fields(cls)
  unknown = sorted(set(kwargs) - fields)
  if unknown:
    raise ValueError(f'mixer {name!r} ({cls.__name__}) has no option(s) {unknown}; '
                     f'valid options: {sorted(fields)}.')
  args = {k: v for k, v in (shared or {}).items() if k in fields}
  if (shared or {}).get('causal') and 'causal' not in fields:
    raise ValueError(f'mixer {name!r} ({cls.__name__}) cannot run causally; '
                     f'pick a mixer with a `causal` option for a language model.')
  args.update(kwargs)
  return cls(**args)
