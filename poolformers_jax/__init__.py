"""poolformers_jax: pooling and multi-resolution attention in JAX/Flax.

Importing the package (or any of its modules) changes nothing in jax; the programs' process-wide
settings are explicit opt-ins in `poolformers_jax.runtime`."""
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil

from poolformers_jax import registry as _registry
from poolformers_jax._version import __version__  # noqa: F401


def import_registering_modules(kind: str) -> list[str]:
  """Imports every module of the kind's subpackage whose text calls `register_<kind>(` or
  `register_<kind>_class(` (a module that registers nothing is not imported), then the kind's
  entry points; returns the names."""
  package = _registry.PACKAGES[kind]
  spec = importlib.util.find_spec(package)
  assert spec is not None and spec.submodule_search_locations is not None, package
  names = []
  for info in pkgutil.iter_modules(spec.submodule_search_locations, package + '.'):
    path = os.path.join(getattr(info.module_finder, 'path', ''),
                        info.name.rsplit('.', 1)[1] + '.py')
    if info.ispkg or not os.path.isfile(path):
      continue
    with open(path, encoding='utf-8') as f:
      text = f.read()
    if f'register_{kind}(' in text or f'register_{kind}_class(' in text:
      names.append(info.name)
  for name in names:
    importlib.import_module(name)
  if kind in _registry.ENTRY_POINT_GROUPS:
    for entry in importlib.metadata.entry_points(group=_registry.ENTRY_POINT_GROUPS[kind]):
      entry.load()
  return names


_registry.set_loader(import_registering_modules)


def __getattr__(name: str):
  """Lazy exports: `import poolformers_jax` stays light (no jax) until one is used."""
  if name in ('load_run', 'Run'):
    from poolformers_jax import run
    return getattr(run, name)
  if name == 'config':   # poolformers_jax.config.load / complete
    return importlib.import_module('poolformers_jax.config')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
