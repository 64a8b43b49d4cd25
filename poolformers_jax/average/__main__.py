"""`python -m poolformers_jax.average`: runs poolformers_jax/programs/average.py."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('average')
