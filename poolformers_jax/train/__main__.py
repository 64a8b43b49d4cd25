"""`python -m poolformers_jax.train`: runs poolformers_jax/programs/train.py (this package is the
training library; the program is there)."""
from poolformers_jax.programs import run

run('train')
