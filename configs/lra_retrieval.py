r"""LRA Retrieval (AAN): do two documents cite each other? Dual encoder.

Run:  python train.py --config configs/lra_retrieval.py:ponet --workdir runs/lra_retrieval_ponet
      python eval.py  --config configs/lra_retrieval.py:ponet --workdir runs/lra_retrieval_ponet --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,runlocal` to
shrink for a CPU. No argument = `transformer,small`.
Data: the LRA release tsv_data (config.data.tsv_dir).

Test accuracy to expect at the paper setting (%):
  transformer 57.46 (LRA) / 79.35 (Nystromformer setting);
  linear 81.10 (AdaMRA Table 1);
  ponet 80.35 (PoNet);
  adamra 84.83 (AdaMRA);
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
  config = get_lra_config(get_data_config('lra_retrieval'), family, retrieval=True)
  config.data.max_length = 4096
  config.batch_size = 32
  config.eval_batch_size = 32
  config.optimizer.learning_rate = 1e-4
  config.optimizer.warmup_steps = 800
  config.num_train_steps = 30000
  config.eval_every_steps = config.checkpoint_every_steps = 1000
  if family == 'ponet':
    config.model.mixer_kwargs.segment_num = 64
  if size == 'small':
    config.data.max_length = 512
    if family == 'ponet':
      config.model.mixer_kwargs.segment_num = max(64 * 512 // 4096, 1)
    config.batch_size = config.eval_batch_size = 32
    config.optimizer.learning_rate = 1e-3
    config.optimizer.warmup_steps = 100
    config.num_train_steps = 2000
    config.eval_every_steps = config.checkpoint_every_steps = 500
  elif size == 'runlocal':
    config.data.max_length = 64
    if family == 'ponet':
      config.model.mixer_kwargs.segment_num = max(64 * 64 // 4096, 1)
    shrink_for_cpu(config, size)
  config.lock()
  return config
