"""poolformers_jax: pooling and multi-resolution attention in JAX/Flax.

Importing the package (or any of its modules) changes nothing in jax; the programs' process-wide
settings are explicit opt-ins in `poolformers_jax.runtime`."""
import importlib.metadata

try:   # the one version string: pyproject.toml's, as installed (pip install -e . included)
  __version__ = importlib.metadata.version('poolformers_jax')
except importlib.metadata.PackageNotFoundError:   # a source tree on sys.path, never installed
  __version__ = '0+unknown'
