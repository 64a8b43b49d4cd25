r"""LRA Pathfinder-32: are the two dots connected? 1024 pixels.

Run:  python train.py --config configs/lra_pathfinder.py:ponet --workdir runs/lra_pathfinder_ponet
      python eval.py  --config configs/lra_pathfinder.py:ponet --workdir runs/lra_pathfinder_ponet --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,runlocal` to
shrink for a CPU. No argument = `transformer,small`.
Data: pathfinder32 npz files or the LRA release PNGs (config.data.pathfinder_dir).

Test accuracy to expect at the paper setting (%):
  transformer 71.40 (LRA) / 74.16 (Nystromformer setting);
  linear 70.20 (AdaMRA Table 1);
  ponet 70.39 (PoNet);
  adamra 75.77 (AdaMRA);
  contextpool / msac: no number reported.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lra_base import Task, task_config  # noqa: E402

TASK = Task('lra_pathfinder', length=1024, batch_size=256, warmup_steps=312,
            num_train_steps=62400, segment_num=1, small_length=1024, runlocal_length=1024,
            eval_every_steps=312)  # eval_frequency of PoNet's / Nystromformer's lra_config.py


def get_config(arg: str | None = None):
  return task_config(TASK, arg)
