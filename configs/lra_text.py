r"""LRA Text: IMDB sentiment from bytes (binary classification).

Run:  python train.py --config configs/lra_text.py:ponet --workdir runs/lra_text_ponet
      python eval.py  --config configs/lra_text.py:ponet --workdir runs/lra_text_ponet --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,tiny` to
shrink for a CPU. No argument = `transformer,small`.
Data: TFDS imdb_reviews (prepared in config.data.data_dir). Full size: 4000 bytes padded to 4096
(PoNet's LRA data; AdaMRA also uses 4K); LRA's own code keeps 1000 bytes.
IMDB has no validation split: as in LRA, validation = test (the best checkpoint is chosen on test).

Test accuracy to expect at the paper setting: the papers' numbers in docs/papers/lra.md
(the one copy: poolformers_jax/experiments/papers.json; contextpool / msac: none reported).
"""
from __future__ import annotations

from poolformers_jax.config.lra import LraTask, task_config

# eval_every_steps, eval_batches: eval_frequency, num_eval_steps of PoNet's / Nystromformer's
# lra_config.py.
TASK = LraTask('lra_text', length=4096, batch_size=32, warmup_steps=8000, num_train_steps=20000,
               segment_num=4096, small_length=512, tiny_length=64,
               eval_every_steps=500, eval_batches=781)


def _full(config):
  config.data.max_tokens = 4000   # PoNet: 4000 bytes + 96 padding (AdaMRA: "4K")


def get_config(arg: str | None = None):
  return task_config(TASK, arg, {'full': _full})
