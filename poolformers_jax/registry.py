"""The registration pattern: a `Registry` per kind, filled by decoration alone.

    @register_mixer('ponet')                         # register_mixer = MIXERS.register
    class PoNet(nn.Module): ...
    register_dataset('listops', DatasetSpec(...))    # a value that is not a def/class
    MODELS['vit'], 'ponet' in MIXERS, sorted(DATASETS)

The first read of a registry imports every module of its kind's subpackage (`PACKAGES`) whose
text calls `register_<kind>(` (docs/design.md, "Registries"); from outside the package,
`config.imports` names the user's modules and installed distributions declare entry points
(`ENTRY_POINT_GROUPS`, docs/install.md).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

# kind -> the subpackage whose modules register names of that kind (walked on first read).
PACKAGES: dict[str, str] = {'mixer': 'poolformers_jax.layers', 'model': 'poolformers_jax.models',
                            'dataset': 'poolformers_jax.data', 'task': 'poolformers_jax.tasks'}

ENTRY_POINT_GROUPS: dict[str, str] = {'mixer': 'poolformers_jax.mixers',
                                      'model': 'poolformers_jax.models'}

_loader: Callable[[str], object] | None = None


def set_loader(loader: Callable[[str], object]) -> None:
  """Installs `loader(kind)`, which imports the modules registering names of `kind`."""
  global _loader
  _loader = loader

_MISSING = object()


class UnknownNameError(KeyError, ValueError):
  """A name no file registered; the message lists the valid names (a KeyError for `in` / `.get`)."""

  def __str__(self) -> str:  # KeyError would quote the message
    return str(self.args[0])


class Registry(Mapping[str, Any]):
  """name -> registered object for one kind; read like a dict, filled by `register`."""

  def __init__(self, kind: str, hint: str = ''):
    self.kind = kind
    self.hint = hint            # where the name came from, for the error line
    self._entries: dict[str, Any] = {}
    self._loaded = False

  def register(self, name: str, value: Any = _MISSING) -> Any:
    """`@registry.register(name)` on a def / class, or `registry.register(name, value)`."""
    if value is _MISSING:
      return lambda obj: self.register(name, obj)
    if name in self._entries and not _same(self._entries[name], value):
      raise ValueError(f'{self.kind} {name!r} is registered twice; pick another name.')
    self._entries[name] = value
    return value

  def _load(self) -> None:
    if not self._loaded and _loader is not None:
      self._loaded = True
      _loader(self.kind)

  def __getitem__(self, name: str) -> Any:
    self._load()
    if name not in self._entries:
      raise UnknownNameError(f'unknown {self.kind} {name!r}{self.hint}; choose one of '
                             f'{sorted(self._entries)}.')
    return self._entries[name]

  def __contains__(self, name: object) -> bool:
    self._load()
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    self._load()
    return iter(self._entries)

  def __len__(self) -> int:
    self._load()
    return len(self._entries)


def _same(old: Any, new: Any) -> bool:
  """The same object, or the same def / class from a file imported again (a notebook reload)."""
  origin = lambda v: (getattr(v, '__module__', None), getattr(v, '__qualname__', None))
  return old is new or (hasattr(new, '__qualname__') and origin(old) == origin(new))


MIXERS = Registry('mixer')
MODELS = Registry('model', ' (config.model.name)')
DATASETS = Registry('dataset', ' (config.data.name)')
TASKS = Registry('task')

register_mixer: Callable = MIXERS.register
register_model: Callable = MODELS.register
register_dataset: Callable = DATASETS.register
register_task: Callable = TASKS.register


def import_modules(names: str | Sequence[str]) -> list[str]:
  """Imports the modules of `config.imports` ('a,b.c' or a list), so what they register is
  found; returns their names."""
  if isinstance(names, str):
    names = names.split(',')
  names = [n.strip() for n in names if n.strip()]
  for name in names:
    try:
      importlib.import_module(name)
    except ModuleNotFoundError as error:
      if error.name is None or not (name == error.name or name.startswith(error.name + '.')):
        raise   # the module exists; something it imports is missing
      raise ValueError(f'config.imports: no module {name!r} on the Python path; give the module '
                       'that registers your mixer / model (its directory on PYTHONPATH)') from None
  return names
