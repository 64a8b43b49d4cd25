"""`python -m poolformers_jax <program> [flags]`: as the `poolformers-jax` console script."""
from poolformers_jax.programs import main

main()
