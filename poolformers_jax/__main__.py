"""`python -m poolformers_jax <program> [flags]`: as the `poolformers-jax` console script."""
from poolformers_jax.programs import main

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  main()
