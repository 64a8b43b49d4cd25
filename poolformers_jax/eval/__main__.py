"""`python -m poolformers_jax.eval`: the `eval` program of `poolformers_jax.programs`."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('eval')
