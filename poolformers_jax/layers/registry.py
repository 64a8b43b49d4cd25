"""The mixer registry: name -> token-mixer class, and `build_mixer` to construct one.

Mixer classes register with `@register_mixer('name')` (their files are listed in
poolformers_jax/registry.py). Models never branch on a mixer name; they call
`build_mixer(name, shared=dict(num_heads=..., causal=..., dropout_rate=...), **config_kwargs)`.
Shared arguments are passed only to mixers that declare them as fields, and an unknown keyword
fails with the list of valid ones; a missing required argument (PoNet's `segment_num`) fails in
one line naming it. A mixer has a causal form when it declares a `causal` field, and takes rotary
positions (config.model.positions='rotary') when it declares a `rotary` field: it has a
query-key product that the rotation applies to (the others are refused in one line).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn

from poolformers_jax.layers import sequence_parallel
from poolformers_jax.registry import MIXERS, register_mixer

__all__ = ['MIXERS', 'build_mixer', 'causal_mixers', 'check_causal', 'check_options',
           'check_required', 'check_rotary', 'check_sequence_parallel', 'mixer_fields',
           'register_mixer', 'rotary_mixers']


def mixer_fields(cls: type[nn.Module]) -> set[str]:
  return {f.name for f in dataclasses.fields(cls) if f.name not in ('parent', 'name')}


def required_fields(cls: type[nn.Module]) -> set[str]:
  return {f.name for f in dataclasses.fields(cls) if f.name not in ('parent', 'name')
          and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def check_options(name: str, options) -> None:
  """One line naming the options (config.model.mixer_kwargs) mixer `name` does not take."""
  cls = MIXERS[name]
  unknown = sorted(set(options) - mixer_fields(cls))
  if unknown:
    raise ValueError(f'mixer {name!r} ({cls.__name__}) has no option(s) {unknown}; '
                     f'valid options: {sorted(mixer_fields(cls))}.')


def check_required(name: str, given) -> None:
  """One line naming the arguments mixer `name` needs that `given` lacks (PoNet's segment_num)."""
  cls = MIXERS[name]
  missing = sorted(required_fields(cls) - set(given))
  if missing:
    raise ValueError(f'mixer {name!r} ({cls.__name__}) needs {missing}: set '
                     f'config.model.mixer_kwargs.{missing[0]} (--config.model.mixer_kwargs.'
                     f'{missing[0]}=...), or pass {missing[0]}= to build_mixer; see docs/api.md')


def causal_mixers() -> list[str]:
  """The registered mixers with a causal form (a `causal` field)."""
  return sorted(name for name, cls in MIXERS.items() if 'causal' in mixer_fields(cls))


def check_causal(name: str) -> None:
  """One line when mixer `name` has no causal form, naming the mixers that have one."""
  cls = MIXERS[name]
  if 'causal' not in mixer_fields(cls):
    raise ValueError(f'mixer {name!r} ({cls.__name__}) cannot run causally (a language model, '
                     f'next-token self-pretraining); the mixers with a causal form: '
                     f'{causal_mixers()}.')


def rotary_mixers() -> list[str]:
  """The registered mixers that take rotary positions (a `rotary` field)."""
  return sorted(name for name, cls in MIXERS.items() if 'rotary' in mixer_fields(cls))


def check_rotary(name: str) -> None:
  """One line when mixer `name` takes no rotary positions (declares no `rotary` field)."""
  cls = MIXERS[name]
  if 'rotary' not in mixer_fields(cls):
    raise ValueError(f"mixer {name!r} ({cls.__name__}) takes no rotary positions; use positions "
                     f"'learned', 'sinusoidal' or 'none', or one of the mixers that take it: "
                     f"{rotary_mixers()}.")


def build_mixer(name: str, *, shared: dict[str, Any] | None = None, **kwargs: Any) -> nn.Module:
  """Builds mixer `name`. `shared` args (num_heads, causal, ...) go only where they are fields;
  `kwargs` (the config's mixer-specific options) must all be fields of the mixer."""
  cls = MIXERS[name]
  fields = mixer_fields(cls)
  check_options(name, kwargs)
  args = {k: v for k, v in (shared or {}).items() if k in fields}
  if (shared or {}).get('causal'):
    check_causal(name)
  if (shared or {}).get('rotary') or kwargs.get('rotary'):
    check_rotary(name)
  args.update(kwargs)
  check_required(name, args)   # else a raw TypeError from the dataclass __init__
  if sequence_parallel.active():
    check_sequence_parallel(name)
  return cls(**args)


def check_sequence_parallel(name: str) -> None:
  """One line when mixer `name` has no sequence-parallel form (its class's `sequence_parallel`),
  with the reason its class gives (`no_sequence_parallel`), naming the mixers that have one."""
  cls = MIXERS[name]
  if not getattr(cls, 'sequence_parallel', ''):
    why = getattr(cls, 'no_sequence_parallel', '')
    why = f' ({why})' if why else ''
    raise ValueError(f'mixer {name!r} ({cls.__name__}) has no sequence-parallel form{why}, so '
                     'it cannot run with config.mesh.sequence > 1; the mixers that have one: '
                     f'{sequence_parallel.mixers_with_form(MIXERS)} (or shard with '
                     '--config.mesh.fsdp and keep --config.mesh.sequence=1).')
