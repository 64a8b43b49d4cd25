"""`python -m poolformers_jax.reproduce`: runs poolformers_jax/programs/reproduce.py."""
from poolformers_jax.programs import run

run('reproduce')
