"""`python -m poolformers_jax.summary`: runs poolformers_jax/programs/summary.py."""
from poolformers_jax.programs import run

run('summary')
