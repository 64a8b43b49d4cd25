r"""LRA Pathfinder-32: are the two dots connected? 1024 pixels.

Run:  python train.py --config configs/lra_pathfinder.py:ponet --workdir runs/lra_pathfinder_ponet
      python eval.py  --config configs/lra_pathfinder.py:ponet --workdir runs/lra_pathfinder_ponet \
        --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,tiny` to
shrink for a CPU. No argument = `transformer,small`.
Data: the LRA release PNGs (config.data.pathfinder_dir; the default at the paper setting), npz
files (`--config.data.format=npz`), or images generated offline (`--config.data.format=generated`,
poolformers_jax/data/generators/pathfinder.py: the LRA layout, made once under data_dir). `small`
and `tiny` use generated images: `:ponet,small` is 20 000 curv_baseline images, 2 000 steps
(measured on 2 CPU cores with today's generator: 50.0 % test, chance, at `dce5276`,
docs/results/pathfinder_generator.md; the first generator's images gave 52.3 %).

Test accuracy to expect at the paper setting: the papers' numbers in docs/papers/lra.md
(the one copy: poolformers_jax/experiments/papers.json; contextpool / msac: none reported).
"""
from __future__ import annotations

from poolformers_jax.config.lra import LraTask, task_config

# eval_every_steps, eval_batches: eval_frequency, num_eval_steps of PoNet's / Nystromformer's
# lra_config.py.
TASK = LraTask('lra_pathfinder', length=1024, batch_size=256, warmup_steps=312,
               num_train_steps=62400, segment_num=1, small_length=1024, tiny_length=1024,
               eval_every_steps=312, eval_batches=312, mask_rate=0.5)


def _full(config):
  # The LRA release folder (lra_release/pathfinder32/curv_baseline/...), as it is downloaded.
  config.data.format = 'lra_release'


def _small(config):
  # 20 000 generated curv_baseline images (16k/2k/2k), made once offline.
  config.data.format = 'generated'
  config.data.generator.num_examples = 20000


def _tiny(config):
  config.data.format = 'generated'
  config.data.generator.update(num_examples=200, images_per_file=100)


def get_config(arg: str | None = None):
  return task_config(TASK, arg, {'full': _full, 'small': _small, 'tiny': _tiny})
