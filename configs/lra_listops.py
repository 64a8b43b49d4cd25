r"""ListOps (Long Range Arena): 10-way classification of nested list operations.

Run (the offline default: a small transformer on short generated ListOps, CPU-sized):
  python train.py --config configs/lra_listops.py --workdir runs/listops_default
Paper setting for one model family (length 2048, 5000 steps, batch 32):
  python train.py --config configs/lra_listops.py:ponet --workdir runs/listops_ponet
  python eval.py  --config configs/lra_listops.py:ponet --workdir runs/listops_ponet \
      --checkpoint best --split test
Smaller variants: `:ponet,small` (CPU-sized, short trees), `:ponet,tiny` (a smoke test).
The quadratic families on a CPU: `--config.length_buckets.multiple=256` trains `transformer` and
`contextpool` on length-grouped micro-batches, each cut to its longest tree: the same update to
float rounding (docs/training.md).
The LRA code PoNet and AdaMRA ran (docs/papers/lra.md): add `reference`, e.g. `:ponet,reference`,
`:linear_reference,reference` (its linear attention). `adamra_eq8` is AdaMRA with Eq. 8's gate
(routed heads summed unscaled, straight-through router gradient), e.g. `:adamra_eq8,reference`.

Test accuracy to expect at the paper setting: the papers' numbers in docs/papers/lra.md
(the one copy: poolformers_jax/experiments/papers.json; contextpool / msac: none reported).
The default (`small`) reaches well above the majority-class rate; the measured number and
time are in docs/results/make_train.md.
"""
from __future__ import annotations

from poolformers_jax.config.lra import LraTask, task_config

# eval_every_steps, eval_batches: eval_frequency, num_eval_steps of PoNet's / Nystromformer's
# lra_config.py.
TASK = LraTask('listops', length=2048, batch_size=32, warmup_steps=1000, num_train_steps=5000,
               segment_num=64, small_length=128, tiny_length=48,
               eval_every_steps=50, eval_batches=62, mask_rate=0.1)


def _small(config):
  # Short trees (20-100 tokens) so a 2-layer model learns the task in minutes on 2 cores.
  g = config.data.generator
  g.min_tokens, g.max_tokens = 20, 100
  g.num_train, g.num_validation, g.num_test = 20000, 1000, 2000
  config.batch_size, config.eval_batch_size = 64, 200
  # 2 000 steps: 44.8 % test (4 000 steps: 46.6 %, twice the time; 3 000: 44.2 %; one seed each,
  # the test set's standard error is ~1.1 %), so `make train` ends within 5 min on 2 cores.
  config.num_train_steps = 2000
  config.eval_every_steps = 250
  config.data.read_threads = 2   # 2 readers keep up with the step and leave the cores to XLA


def _tiny(config):
  g = config.data.generator
  g.min_tokens, g.max_tokens = 10, 40
  g.num_train, g.num_validation, g.num_test = 256, 64, 64


def get_config(arg: str | None = None):
  """No argument = the CPU-sized offline default (`transformer,small`, 100 positions)."""
  config = task_config(TASK, arg, {'small': _small, 'tiny': _tiny})
  if arg is None:
    # Without parentheses every small tree has < 100 tokens: 100 positions lose nothing and
    # save ~30% of each step against 128 on 2 CPU cores (benchmarked in one process).
    with config.unlocked():
      config.data.max_length = 100
  return config
