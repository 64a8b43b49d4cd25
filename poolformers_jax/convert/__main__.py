"""`python -m poolformers_jax.convert`: runs poolformers_jax/programs/convert.py."""
from poolformers_jax.programs import run

run('convert')
