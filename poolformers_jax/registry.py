"""The one registration pattern: a `Registry` per kind, and every file that registers, listed here.

    @register_model('vit')                      # models/registry.py: register_model = MODELS.register
    def build_vit(cfg): ...
    @register_mixer('ponet')                    # layers/registry.py: register_mixer = MIXERS.register
    class PoNet(nn.Module): ...
    register_dataset('listops', DatasetSpec(...))   # a value that is not a def/class: same method
    MODELS['vit'], 'ponet' in MIXERS, sorted(DATASETS)

A registry imports the files of its kind (`MODULES` below) the first time it is read, so importing
a registry is cheap and free of cycles, and a name is found whatever the caller imported before.
A new paper's mixer, model or dataset file goes in `MODULES`; nothing else needs a side-effect
import.

Outside the package, without editing it: a module of the user's that registers names is imported
by the programs from `config.imports` ('my_mixers,lab.models'; `import_modules`), and an installed
distribution registers through the entry-point groups `poolformers_jax.mixers` /
`poolformers_jax.models` (each entry point names a module, loaded with the kind's own files):

    [project.entry-points."poolformers_jax.mixers"]
    my_mixer = "my_package.my_mixer"
"""
from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Callable, Iterator, Mapping, Sequence

# kind -> the modules that register names of that kind (imported on first lookup).
MODULES: dict[str, tuple[str, ...]] = {
    'mixer': ('poolformers_jax.layers.attention', 'poolformers_jax.layers.ponet',
              'poolformers_jax.layers.adamra', 'poolformers_jax.layers.context_pool',
              'poolformers_jax.layers.msac'),
    'model': ('poolformers_jax.models.encoder', 'poolformers_jax.models.lm',
              'poolformers_jax.models.vit', 'poolformers_jax.models.swin',
              'poolformers_jax.models.convnet', 'poolformers_jax.models.msac_models',
              'poolformers_jax.models.ponet_mlm', 'poolformers_jax.models.seq2seq'),
    'dataset': ('poolformers_jax.data.listops', 'poolformers_jax.data.lra',
                'poolformers_jax.data.text_lm', 'poolformers_jax.data.vision',
                'poolformers_jax.data.bert_text', 'poolformers_jax.data.translation'),
    'task': ('poolformers_jax.tasks.classification', 'poolformers_jax.tasks.text',
             'poolformers_jax.tasks.masked_tokens'),
}

# kind -> the entry-point group whose installed plugins register names of that kind
ENTRY_POINT_GROUPS: dict[str, str] = {'mixer': 'poolformers_jax.mixers',
                                      'model': 'poolformers_jax.models'}

_MISSING = object()


class UnknownNameError(KeyError, ValueError):
  """A name no file registered; one line with the valid names (a KeyError for `in` / `.get`)."""

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
    if not self._loaded:
      self._loaded = True
      for module in MODULES[self.kind]:
        importlib.import_module(module)
      if self.kind in ENTRY_POINT_GROUPS:
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUPS[self.kind]):
          entry.load()

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
  found; returns their names. A module that is not importable fails in one line."""
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
