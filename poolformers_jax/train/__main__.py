"""`python -m poolformers_jax.train`: runs poolformers_jax/programs/train.py (this package is the
training library; the program is there)."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('train')
