"""`python -m poolformers_jax.translate`: runs poolformers_jax/programs/translate.py."""
from poolformers_jax.programs import run

run('translate')
