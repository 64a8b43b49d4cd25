r"""LRA Image: CIFAR-10 as a sequence of 1024 gray pixels.

Run:  python train.py --config configs/lra_image.py:ponet --workdir runs/lra_image_ponet
      python eval.py  --config configs/lra_image.py:ponet --workdir runs/lra_image_ponet \
        --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,tiny` to
shrink for a CPU. No argument = `transformer,small`.
Data: TFDS cifar10 (prepared in config.data.data_dir).

Test accuracy to expect at the paper setting: the papers' numbers in docs/papers/lra.md
(the one copy: poolformers_jax/experiments/papers.json; contextpool / msac: none reported).
"""
from __future__ import annotations

from poolformers_jax.config.lra import LraTask, task_config

# eval_every_steps, eval_batches: eval_frequency, num_eval_steps of PoNet's / Nystromformer's
# lra_config.py.
TASK = LraTask('lra_image', length=1024, batch_size=256, warmup_steps=175, num_train_steps=35000,
               segment_num=32, small_length=1024, tiny_length=1024,
               eval_every_steps=175, eval_batches=20, mask_rate=0.5)


def get_config(arg: str | None = None):
  return task_config(TASK, arg)
