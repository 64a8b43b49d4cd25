"""`python -m poolformers_jax.convert`: runs poolformers_jax/programs/convert.py."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('convert')
