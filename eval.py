"""`python eval.py --workdir DIR [--config ...] [--checkpoint best|latest|averaged|STEP] [--split
validation|test]`: the evaluation program in a checkout, the same as `python -m
poolformers_jax.eval` (poolformers_jax/eval.py)."""
from poolformers_jax import eval as evaluation

if __name__ == '__main__':
  evaluation.main()
