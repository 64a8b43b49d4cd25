"""poolformers_jax: pooling and multi-resolution attention in JAX/Flax."""
__version__ = '0.1.0'
