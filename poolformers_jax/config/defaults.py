"""Every key the trainer reads, with its default (`base_config`), the size words every config
file shares (`SIZES`, `shrink_run`) and the fixed choices of a few keys (big_vision's
configs/common.py).

A config file starts from `base_config(data_name)` and only overrides; the trainer has no defaults
of its own, so what a run does is what its config.json says. Model sizes the data decides are
placeholders filled when a run starts (config/completion.py).

Size words, the same in every config file that has a smaller run:
    full   the paper's setting (the default)
    small  a CPU-sized run of the same model family (minutes to an hour on a laptop)
    tiny   a smoke test that runs in seconds; it also shrinks the model
"""
from __future__ import annotations

import ml_collections

from poolformers_jax.data import get_data_config

# config.param_init: the initialisation schemes of trainer/param_init.py.
PARAM_INIT_SCHEMES = ('default', 'torch')
# config.model.dtype: the compute dtypes a model takes (parameters stay float32).
DTYPES = ('float32', 'bfloat16', 'float16')
# config.model.remat: what each block keeps for the backward pass (models/block.py's Remat).
REMAT = ('none', 'full', 'dots')


def base_config(data_name: str) -> ml_collections.ConfigDict:
  """Every key the trainer reads, with its default; `config.model` is the config file's."""
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.imports = ''   # 'my_mixers,lab.models': modules the programs import first (registry.py)
  config.data = get_data_config(data_name)   # the dataset's own keys (data/<dataset>.py)
  config.model = ml_collections.ConfigDict()   # name + fields of a registered model
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3,        # the peak, after warmup
      b1=0.9, b2=0.999, eps=1e-8,   # AdamW
      weight_decay=0.0,          # masked off biases, norms and position embeddings
      schedule='constant',       # constant | cosine | linear | one_cycle | inverse_sqrt
      cycle_momentum=False,      # one_cycle: beta1 0.95 -> 0.85 -> 0.95 (PyTorch OneCycleLR)
      warmup_steps=0,            # linear warmup from 0 (one_cycle: from peak / 25)
      grad_clip_norm=0.0,        # 0 = no clipping
      grad_accum_steps=1,        # optax.MultiSteps: an update per k steps (of micro-batches)
  ))
  config.label_smoothing = 0.0
  config.param_init = 'default'          # 'torch': PyTorch's defaults (trainer/param_init.py)
  # DeiT's batch mixing for image classification (trainer/mixup.py); both alphas 0 = off.
  config.mixup = ml_collections.ConfigDict(dict(mixup_alpha=0.0, cutmix_alpha=0.0,
                                                switch_prob=0.5))
  config.batch_size = 32                 # global, over all processes and devices
  # Length-grouped micro-batches (trainer/length_buckets.py, docs/training.md): each global batch
  # is sorted by real length, split into micro-batches of `micro_batch_size` examples, each cut to
  # a multiple of `multiple` tokens; their summed gradients make a single update, the whole
  # batch's to float rounding. Evaluation batches are cut the same way. multiple=0: off.
  config.length_buckets = ml_collections.ConfigDict(dict(multiple=0, micro_batch_size=8))
  config.eval_batch_size = 0             # global; 0 = batch_size
  config.num_train_steps = 1000          # 0: nothing to train (init_from, then evaluate)
  config.num_train_epochs = 0.0          # > 0: num_train_steps = ceil(epochs x train examples /
                                         # batch_size), from the data (config/completion.py)
  config.log_every_steps = 100           # every N steps; 0 or less = only at the end
  config.eval_every_steps = 1000         # on validation; the best checkpoint is kept
  config.eval_num_batches = 0            # 0: all of validation, exactly; N: N eval batches of an
                                         # endless reshuffled validation stream (LRA reference)
  config.test_drop_last = False          # True: test on N - N % eval_batch_size examples
  config.checkpoint_every_steps = 1000
  config.keep_checkpoints = 2            # latest checkpoints kept (the best is kept apart)
  config.best_metric = 'accuracy'        # a validation metric of the task
  config.best_mode = 'max'               # 'max' | 'min'
  config.final_test = True               # evaluate the best checkpoint on test at the end
  config.init_from = ''                  # workdir / checkpoint: start from its parameters
  config.init_from_fresh = ''            # regex of parameter names kept freshly initialised
  config.init_from_allow_missing = ''    # regex of names the checkpoint may lack (a new head)
  # True: refuse an init_from pre-training run at its data's unigram rate (trainer/init_check.py)
  config.init_from_refuse_unlearned = False
  config.num_devices = -1                # -1 = all local devices
  # The device mesh (trainer/sharding.py, docs/training.md#sharding): data parallel by default.
  # fsdp splits the examples and the large parameters / optimizer state; sequence splits every
  # example's tokens. -1 = the devices the other axes leave. `rules`: 'regex=spec;...' overrides
  # of which dimension of a parameter fsdp splits; `fsdp_min_size`: smaller leaves are replicated.
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, sequence=1, rules='',
                                               fsdp_min_size=2**14))
  config.progress_bar = True
  # Where metrics go besides DIR/metrics.jsonl (trainer/writers.py): 'tensorboard', 'wandb'
  # (needs wandb installed), comma-separated; '' for none.
  config.writers = 'tensorboard'
  config.profile_steps = ()              # (first, last): jax.profiler trace in DIR/profile
  # Generated outputs scored at evaluation (translation: beam search, then BLEU).
  config.decode = ml_collections.ConfigDict(dict(
      beam_size=4, alpha=0.6,            # Vaswani et al.; beam_size 1 = greedy
      batch_tokens=4096,                 # source tokens (padding included) decoded at once
      bleu_splits=(),                    # splits whose evaluation also decodes and scores BLEU
      max_sentences=0,                   # of those splits; 0 = every sentence
      validation_sentences=0,            # > 0: BLEU of the first N validation sentences at
                                         # every evaluation during training (0 = off)
      tokenized_bleu='moses',            # 'moses' (sacremoses, t2t get_ende_bleu.sh) | '13a'
  ))
  return config


SIZES = ('full', 'small', 'tiny')
SIZE_SLOT = ('a size', SIZES)


def shrink_run(config: ml_collections.ConfigDict, size: str, small_batch_size: int) -> None:
  """The run of a size word (the model is the config file's business): `small` trains 2 000
  steps of `small_batch_size`, `tiny` 20 steps of 8 examples; `full` changes nothing."""
  if size == 'small':
    config.update(batch_size=small_batch_size, num_train_steps=2000, log_every_steps=50,
                  eval_every_steps=500, checkpoint_every_steps=500)
    config.optimizer.warmup_steps = 100
  elif size == 'tiny':
    config.update(batch_size=8, num_train_steps=20, log_every_steps=5, eval_every_steps=10,
                  checkpoint_every_steps=10)
    config.optimizer.warmup_steps = 2
