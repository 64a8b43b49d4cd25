"""`python train.py --config configs/<task>.py[:words] --workdir DIR [--config.k=v]`: the training
program in a checkout, the same as `python -m poolformers_jax.train` (poolformers_jax/train.py)."""
from poolformers_jax import train

if __name__ == '__main__':
  train.main()
