"""`python -m poolformers_jax.summary`: runs poolformers_jax/programs/summary.py."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('summary')
