"""`python -m poolformers_jax.eval`: runs poolformers_jax/programs/eval.py."""
from poolformers_jax.programs import run

run('eval')
