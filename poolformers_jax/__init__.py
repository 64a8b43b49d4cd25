"""poolformers_jax: pooling and multi-resolution attention in JAX/Flax.

Importing the package (or any of its modules) changes nothing in jax; the programs' process-wide
settings are explicit opt-ins in `poolformers_jax.runtime`."""
import importlib

from poolformers_jax._version import __version__  # noqa: F401


def __getattr__(name: str):
  """Lazy exports: `import poolformers_jax` stays light (no jax) until one is used."""
  if name in ('load_run', 'Run'):
    from poolformers_jax import run
    return getattr(run, name)
  if name == 'config':   # poolformers_jax.config.load / complete
    return importlib.import_module('poolformers_jax.config')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
