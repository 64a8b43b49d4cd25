"""`python train.py --config configs/<task>.py[:words] --workdir DIR [--config.k=v]`: the training
program of a checkout, as `python -m poolformers_jax.train` runs it from an install (flags and
exit codes: poolformers_jax/programs/train.py)."""
from poolformers_jax.programs import run

if __name__ == '__main__':
  run('train')
