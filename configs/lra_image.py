r"""LRA Image: CIFAR-10 as a sequence of 1024 gray pixels.

Run:  python train.py --config configs/lra_image.py:ponet --workdir runs/lra_image_ponet
      python eval.py  --config configs/lra_image.py:ponet --workdir runs/lra_image_ponet --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,runlocal` to
shrink for a CPU. No argument = `transformer,small`.
Data: TFDS cifar10 (prepared in config.data.data_dir).

Test accuracy to expect at the paper setting (%):
  transformer 42.44 (LRA) / 38.20 (Nystromformer setting);
  linear 38.20 (AdaMRA Table 1);
  ponet 46.88 (PoNet);
  adamra 46.00 (AdaMRA);
  contextpool / msac: no number reported.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lra_base import get_lra_config, parse_arg, shrink_for_cpu  # noqa: E402
from poolformers_jax.data import get_data_config  # noqa: E402


def get_config(arg: str | None = None):
  family, size = parse_arg(arg, default_size='full' if arg else 'small')
  config = get_lra_config(get_data_config('lra_image'), family)
  config.data.max_length = 1024
  config.batch_size = 256
  config.eval_batch_size = 256
  config.optimizer.learning_rate = 1e-4
  config.optimizer.warmup_steps = 175
  config.num_train_steps = 35000
  config.eval_every_steps = config.checkpoint_every_steps = 1000
  if family == 'ponet':
    config.model.mixer_kwargs.segment_num = 32
  if size == 'small':
    config.data.max_length = 1024
    if family == 'ponet':
      config.model.mixer_kwargs.segment_num = max(32 * 1024 // 1024, 1)
    config.batch_size = config.eval_batch_size = 32
    config.optimizer.learning_rate = 1e-3
    config.optimizer.warmup_steps = 100
    config.num_train_steps = 2000
    config.eval_every_steps = config.checkpoint_every_steps = 500
  elif size == 'runlocal':
    config.data.max_length = 1024
    if family == 'ponet':
      config.model.mixer_kwargs.segment_num = max(32 * 1024 // 1024, 1)
    shrink_for_cpu(config, size)
  config.lock()
  return config
