"""`python -m poolformers_jax.average`: runs poolformers_jax/programs/average.py."""
from poolformers_jax.programs import run

run('average')
