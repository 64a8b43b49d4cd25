"""`python -m poolformers_jax.translate`: runs poolformers_jax/programs/translate.py."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('translate')
