"""The mixer registry: name -> token-mixer class, `build_mixer` to construct one, and
`MixerTraits`, the facts a mixer declares about itself (`traits_of`).

Mixer classes register with `@register_mixer('name')` in their own file under layers/ (found by
the registry's package walk). Models never branch on a mixer name; they call
`build_mixer(name, shared=dict(num_heads=..., causal=..., dropout_rate=...), **config_kwargs)`.
Shared arguments are passed only to mixers that declare them as fields, and an unknown keyword
fails with the list of valid ones; a missing required argument (PoNet's `segment_num`) fails
naming it. A mixer has a causal form when it declares a `causal` field, and takes rotary
positions (config.model.positions='rotary') when it declares a `rotary` field: it has a
query-key product that the rotation applies to (the others are refused).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import flax.linen as nn

from poolformers_jax.layers import sequence_parallel
from poolformers_jax.registry import MIXERS, register_mixer

__all__ = ['MIXERS', 'MixerTraits', 'build_mixer', 'causal_mixers', 'check_causal',
           'check_options', 'check_required', 'check_rotary', 'check_sequence_parallel',
           'check_use', 'mixer_fields', 'mixer_table_row', 'module_fields', 'options_of',
           'register_mixer', 'rotary_mixers', 'sequence_parallel_mixers', 'traits_of']


@dataclasses.dataclass(frozen=True)
class MixerTraits:
  """A mixer's facts, declared once on its class (`traits = MixerTraits(...)`) and read through
  `traits_of` by config validation, the kit (poolformers_jax.testing.check_mixer), docs/api.md's
  mixer table and the errors. What the class's fields already say is not declared again: a
  `causal` field is a causal form, a `rotary` field takes rotary positions, a field without a
  default is a required option (`required_fields`). `shapes`, `mask` and `two_d` are docs/api.md's
  columns, in words.
  """
  shapes: str = '`[B, L, D]` → `[B, L, D]`'
  # Why the *amount* of padding changes the real outputs ('' = it never does, so
  # config.length_buckets may cut a batch to its real lengths, and the kit checks it); a function
  # of the mixer's options {field: value} where an option decides.
  padding_amount: str | Callable[[Mapping[str, Any]], str] = ''
  mask: str = 'yes'
  two_d: str = 'no'
  # A sequence-parallel form (layers/sequence_parallel.py): it runs with the tokens split over
  # devices (config.mesh.sequence > 1). The note: what crosses devices; without the form, why
  # there is none (the refusal names it).
  sequence_parallel: bool = False
  sequence_parallel_note: str = ''
  # Properties of check_mixer other than padding_amount that do not hold by design
  # {property: why}, or a function of the options giving them.
  not_by_design: Mapping[str, str] | Callable[[Mapping[str, Any]], Mapping[str, str]] = (
      dataclasses.field(default_factory=dict))
  # Call arguments carrying a text's sentence structure that the mixer reads (a model with
  # sentence inputs passes them), and the options such a model sets for it.
  sentence_inputs: tuple[str, ...] = ()
  sentence_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def why_padding_amount_matters(self, options: Mapping[str, Any]) -> str:
    """'' when the amount of padding never changes the real outputs under `options` (every
    field's value: `options_of`)."""
    amount = self.padding_amount
    return amount(options) if callable(amount) else amount

  def why_padding_amount_matters_for(self, cls: type, options: Mapping[str, Any]) -> str:
    """The same for config.model.mixer_kwargs `options` of mixer class `cls` (its defaults
    filled in)."""
    return self.why_padding_amount_matters(options_of(cls, options))

  def kit_skips(self, options: Mapping[str, Any]) -> dict[str, str]:
    """{property: why} check_mixer skips for a mixer with these options."""
    skips = dict(self.not_by_design(options) if callable(self.not_by_design)
                 else self.not_by_design)
    why = self.why_padding_amount_matters(options)
    if why:
      skips['padding_amount'] = why
    return skips


def traits_of(mixer: Any) -> MixerTraits:
  """The facts a mixer class (or instance) declares; a class declaring none has the defaults."""
  cls = mixer if isinstance(mixer, type) else type(mixer)
  traits = getattr(cls, 'traits', MixerTraits())
  if not isinstance(traits, MixerTraits):
    raise TypeError(f'{cls.__name__}.traits must be a MixerTraits (poolformers_jax.layers.'
                    f'registry), got {type(traits).__name__}.')
  return traits


def mixer_table_row(name: str) -> str:
  """docs/api.md's row of mixer `name`: its class, shapes, mask, causal and rotary forms (from
  its fields) and 2-D form (from its traits)."""
  cls = MIXERS[name]
  traits, fields = traits_of(cls), mixer_fields(cls)
  yes = lambda field: 'yes' if field in fields else 'no'
  return (f'| `{name}` | `{cls.__name__}` | {traits.shapes} | {traits.mask} | {yes("causal")} | '
          f'{yes("rotary")} | {traits.two_d} |')


def module_fields(cls: type | nn.Module) -> dict[str, dataclasses.Field]:
  """The dataclass fields of a Flax module (class), without flax's own `parent` and `name`."""
  return {f.name: f for f in dataclasses.fields(cls) if f.name not in ('parent', 'name')}


def options_of(cls: type | nn.Module,
               options: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """{field: value}: `options` over the class's defaults (an instance: its own values)."""
  if not isinstance(cls, type):
    return {name: getattr(cls, name) for name in module_fields(cls)}
  values = {}
  for name, f in module_fields(cls).items():
    if f.default is not dataclasses.MISSING:
      values[name] = f.default
    elif f.default_factory is not dataclasses.MISSING:
      values[name] = f.default_factory()
  return {**values, **(options or {})}


def mixer_fields(cls: type[nn.Module]) -> set[str]:
  return set(module_fields(cls))


def required_fields(cls: type[nn.Module]) -> set[str]:
  return {name for name, f in module_fields(cls).items()
          if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def check_options(name: str, options) -> None:
  """The error naming the options (config.model.mixer_kwargs) mixer `name` does not take."""
  cls = MIXERS[name]
  unknown = sorted(set(options) - mixer_fields(cls))
  if unknown:
    raise ValueError(f'mixer {name!r} ({cls.__name__}) has no option(s) {unknown}; '
                     f'valid options: {sorted(mixer_fields(cls))}.')


def check_required(name: str, given) -> None:
  """The error naming the arguments mixer `name` needs that `given` lacks (PoNet's segment_num)."""
  cls = MIXERS[name]
  missing = sorted(required_fields(cls) - set(given))
  if missing:
    raise ValueError(f'mixer {name!r} ({cls.__name__}) needs {missing}: set '
                     f'config.model.mixer_kwargs.{missing[0]} (--config.model.mixer_kwargs.'
                     f'{missing[0]}=...), or pass {missing[0]}= to build_mixer; see docs/api.md')


def mixers_with(field: str) -> list[str]:
  """The registered mixers declaring `field`: 'causal' (a causal form), 'rotary' (rotary
  positions)."""
  return sorted(name for name, cls in MIXERS.items() if field in mixer_fields(cls))


causal_mixers = functools.partial(mixers_with, 'causal')
rotary_mixers = functools.partial(mixers_with, 'rotary')


def check_causal(name: str) -> None:
  """The error when mixer `name` has no causal form, naming the mixers that have one."""
  if 'causal' not in mixer_fields(MIXERS[name]):
    raise ValueError(f'mixer {name!r} ({MIXERS[name].__name__}) cannot run causally (a language '
                     'model, next-token self-pretraining); the mixers with a causal form: '
                     f'{causal_mixers()}.')


def check_rotary(name: str) -> None:
  """The error when mixer `name` takes no rotary positions (declares no `rotary` field)."""
  if 'rotary' not in mixer_fields(MIXERS[name]):
    raise ValueError(f"mixer {name!r} ({MIXERS[name].__name__}) takes no rotary positions; use "
                     "positions 'learned', 'sinusoidal' or 'none', or one of the mixers that take "
                     f'it: {rotary_mixers()}.')


def check_use(name: str, options: Iterable[str], *, given: Iterable[str] = (),
              causal: bool = False, rotary: bool = False) -> None:
  """Every check of using mixer `name` with `options` (config.model.mixer_kwargs) and
  the other arguments `given`: options it has, its causal form and rotary positions if asked
  for, and its required arguments (else a raw TypeError from the dataclass __init__). A model
  checks when it is built and `build_mixer` at every trace: a use already checked is not checked
  again."""
  cls = MIXERS[name]
  missing = frozenset(required_fields(cls) - set(options) - set(given))
  _check_use(name, cls, frozenset(options), missing, bool(causal), bool(rotary))


@functools.lru_cache(maxsize=1024)
def _check_use(name: str, cls: type, options: frozenset, missing: frozenset, causal: bool,
               rotary: bool) -> None:
  del cls   # in the key: a name registered again (a test's throw-away mixer) is a new use
  check_options(name, options)
  if causal:
    check_causal(name)
  if rotary:
    check_rotary(name)
  check_required(name, set(required_fields(MIXERS[name])) - missing)


def build_mixer(name: str, *, shared: dict[str, Any] | None = None, **kwargs: Any) -> nn.Module:
  """Builds mixer `name`. `shared` args (num_heads, causal, ...) go only where they are fields;
  `kwargs` (the config's mixer-specific options) must all be fields of the mixer.

  ```pycon
  >>> from poolformers_jax.layers import build_mixer
  >>> mixer = build_mixer('ponet', shared=dict(num_heads=4, causal=False), segment_num=8)
  >>> type(mixer).__name__, mixer.num_heads, mixer.segment_num
  ('PoNet', 4, 8)
  >>> build_mixer('ponet', shared=dict(num_heads=4), segment=8)
  Traceback (most recent call last):
  ValueError: mixer 'ponet' (PoNet) has no option(s) ['segment']; valid options: [...].

  ```
  """
  cls = MIXERS[name]
  fields = mixer_fields(cls)
  args = {k: v for k, v in (shared or {}).items() if k in fields}
  check_use(name, kwargs, given=args, causal=bool((shared or {}).get('causal')),
            rotary=bool((shared or {}).get('rotary') or kwargs.get('rotary')))
  args.update(kwargs)
  if sequence_parallel.active():
    check_sequence_parallel(name)
  return cls(**args)


def sequence_parallel_mixers() -> list[str]:
  """The registered mixers with a sequence-parallel form (`MixerTraits.sequence_parallel`)."""
  return sorted(name for name, cls in MIXERS.items() if traits_of(cls).sequence_parallel)


def check_sequence_parallel(name: str) -> None:
  """The error when mixer `name` has no sequence-parallel form, with the reason its traits give
  (`sequence_parallel_note`), naming the mixers that have one."""
  cls = MIXERS[name]
  traits = traits_of(cls)
  if not traits.sequence_parallel:
    why = f' ({traits.sequence_parallel_note})' if traits.sequence_parallel_note else ''
    causal = sorted(set(sequence_parallel_mixers()) & set(causal_mixers()))
    raise ValueError(f'mixer {name!r} ({cls.__name__}) has no sequence-parallel form{why}, so '
                     'it cannot run with config.mesh.sequence > 1; the mixers that have one: '
                     f'{sequence_parallel_mixers()}, of which causal (a language model): '
                     f'{causal} (or shard with '
                     '--config.mesh.fsdp and keep --config.mesh.sequence=1).')
