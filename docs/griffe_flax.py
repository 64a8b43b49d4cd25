"""A griffe extension (mkdocs.yml): a Flax linen module's signature is its fields.

Flax makes every `nn.Module` subclass a dataclass without the `@dataclass` decorator that griffe
looks for, so the API pages would show `PoNet` with no signature. This gives each such class the
`__init__` its dataclass has: the annotated fields of the class and of its own module bases, in
order, with their defaults (Flax's `parent` and `name` left out), which mkdocstrings shows as the
class's signature (`merge_init_into_class`).
"""
from __future__ import annotations

import griffe

FLAX_MODULE = ('flax.linen.Module', 'flax.linen.module.Module', 'nn.Module')


def _base_classes(cls: griffe.Class) -> list[griffe.Class]:
  """The bases of `cls` that are classes of the loaded package."""
  found = []
  for base in cls.bases:
    path = getattr(base, 'canonical_path', str(base))
    try:
      target = cls.modules_collection[path]
    except (KeyError, ValueError, AttributeError):
      continue
    if target.is_alias:
      try:
        target = target.final_target
      except griffe.AliasResolutionError:
        continue
    if target.is_class:
      found.append(target)
  return found


def _is_flax_module(cls: griffe.Class) -> bool:
  if any(getattr(b, 'canonical_path', str(b)) in FLAX_MODULE for b in cls.bases):
    return True
  return any(_is_flax_module(base) for base in _base_classes(cls))


def _fields(cls: griffe.Class) -> dict[str, griffe.Parameter]:
  fields: dict[str, griffe.Parameter] = {}
  for base in reversed(_base_classes(cls)):
    fields.update(_fields(base))
  for member in cls.members.values():
    if (member.is_alias or not member.is_attribute or member.annotation is None
        or member.name.startswith('_') or member.name in ('parent', 'name')
        or ('class-attribute' in member.labels and 'instance-attribute' not in member.labels)):
      continue
    fields.pop(member.name, None)   # a redefined field keeps its place at the end, as dataclasses
    fields[member.name] = griffe.Parameter(
        member.name, annotation=member.annotation, default=member.value,
        kind=griffe.ParameterKind.positional_or_keyword, docstring=member.docstring)
  return fields


def _visit(obj, seen: set[str]) -> None:
  if obj.is_alias or obj.path in seen:
    return
  seen.add(obj.path)
  if obj.is_class and '__init__' not in obj.members and _is_flax_module(obj):
    parameters = list(_fields(obj).values())
    # A required field after one with a default (a subclass's, e.g. num_classes) is keyword-only.
    first_default = next((i for i, p in enumerate(parameters) if p.default is not None),
                         len(parameters))
    late = [p for p in parameters[first_default:] if p.default is None]
    for p in late:
      p.kind = griffe.ParameterKind.keyword_only
    parameters = [p for p in parameters if p not in late] + late
    obj.set_member('__init__', griffe.Function(
        '__init__', lineno=obj.lineno, endlineno=obj.lineno, parent=obj, returns='None',
        parameters=griffe.Parameters(
            griffe.Parameter('self', kind=griffe.ParameterKind.positional_or_keyword),
            *parameters)))
  for member in list(obj.members.values()):
    if not member.is_alias and (member.is_module or member.is_class):
      _visit(member, seen)


class FlaxModuleSignatures(griffe.Extension):
  def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
    del kwargs
    _visit(pkg, set())
