"""poolformers_jax: pooling and multi-resolution attention in JAX/Flax.

Importing the package (or any of its modules) changes nothing in jax; the programs' process-wide
settings are explicit opt-ins in `poolformers_jax.runtime`."""
from poolformers_jax._version import __version__  # noqa: F401
