"""`python -m poolformers_jax.eval`: runs poolformers_jax/programs/eval.py."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('eval')
