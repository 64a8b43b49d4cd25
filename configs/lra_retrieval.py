r"""LRA Retrieval (AAN): do two documents cite each other? Dual encoder.

Run:  python train.py --config configs/lra_retrieval.py:ponet --workdir runs/lra_retrieval_ponet
      python eval.py  --config configs/lra_retrieval.py:ponet --workdir runs/lra_retrieval_ponet \
        --split test
Families: transformer, linear, ponet, adamra, contextpool, msac; add `,small` or `,tiny` to
shrink for a CPU. No argument = `transformer,small`.
Data: the LRA release tsv_data (config.data.tsv_dir).

Test accuracy to expect at the paper setting: the papers' numbers in docs/papers/lra.md
(the one copy: poolformers_jax/experiments/papers.json; contextpool / msac: none reported).
"""
from __future__ import annotations

from poolformers_jax.config.lra import LraTask, task_config

# eval_every_steps, eval_batches: eval_frequency, num_eval_steps of PoNet's / Nystromformer's
# lra_config.py.
TASK = LraTask('lra_retrieval', length=4096, batch_size=32, warmup_steps=800,
               num_train_steps=30000, segment_num=64, small_length=512, tiny_length=64,
               retrieval=True,
               eval_every_steps=300, eval_batches=565)


def _full(config):
  config.data.max_tokens = 4000   # PoNet / Nystromformer: 4000 bytes per document + 96 padding


def get_config(arg: str | None = None):
  return task_config(TASK, arg, {'full': _full})
