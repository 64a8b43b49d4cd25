"""`python -m poolformers_jax.train`: runs the `train` program of `poolformers_jax.programs` (this
package is the training library)."""
from poolformers_jax.programs import run

if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  run('train')
