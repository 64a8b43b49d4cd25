r"""LRA Text: IMDB sentiment from bytes (binary classification).

Run:  python train.py --config configs/lra_text.py:ponet --workdir runs/lra_text_ponet
      python eval.py  --config configs/lra_text.py:ponet --workdir runs/lra_text_ponet --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,runlocal` to
shrink for a CPU. No argument = `transformer,small`.
Data: TFDS imdb_reviews (prepared in config.data.data_dir); PoNet uses length 4096, LRA/AdaMRA 1024.

Test accuracy to expect at the paper setting (%):
  transformer 64.27 (LRA) / 65.02 (Nystromformer setting);
  linear 64.15 (AdaMRA Table 1);
  ponet 69.82 (PoNet);
  adamra 68.44 (AdaMRA);
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
  config = get_lra_config(get_data_config('lra_text'), family)
  config.data.max_length = 4096
  config.batch_size = 32
  config.eval_batch_size = 32
  config.optimizer.learning_rate = 1e-4
  config.optimizer.warmup_steps = 8000
  config.num_train_steps = 20000
  config.eval_every_steps = config.checkpoint_every_steps = 1000
  if family == 'ponet':
    config.model.mixer_kwargs.segment_num = 4096
  if size == 'small':
    config.data.max_length = 512
    if family == 'ponet':
      config.model.mixer_kwargs.segment_num = max(4096 * 512 // 4096, 1)
    config.batch_size = config.eval_batch_size = 32
    config.optimizer.learning_rate = 1e-3
    config.optimizer.warmup_steps = 100
    config.num_train_steps = 2000
    config.eval_every_steps = config.checkpoint_every_steps = 500
  elif size == 'runlocal':
    config.data.max_length = 64
    if family == 'ponet':
      config.model.mixer_kwargs.segment_num = max(4096 * 64 // 4096, 1)
    shrink_for_cpu(config, size)
  config.lock()
  return config
