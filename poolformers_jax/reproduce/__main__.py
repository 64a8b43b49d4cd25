"""`python -m poolformers_jax.reproduce`: runs poolformers_jax/programs/reproduce.py."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('reproduce')
