"""`python eval.py --workdir DIR [--config ...] [--checkpoint best|latest|averaged|STEP] [--split
validation|test]`: the evaluation program of a checkout, as `python -m poolformers_jax.eval` runs
it from an install (flags and output: poolformers_jax/programs/eval.py)."""
from poolformers_jax.programs import run

if __name__ == '__main__':
  run('eval')
