"""The one config spine (big_vision's configs/common.py); config files import it by module path.

- `base_config(data_name)`: EVERY trainer and optimizer key with its default. A config file starts
  from it and only overrides; the trainer reads every key directly (no defaults elsewhere), so
  what a run does is what its config.json says.
- `parse_words`: THE parser of config arguments (`configs/x.py:word,word`) of every config file.
- Size words, the same in every config file that has a smaller run (`SIZES`, `shrink_run`):
    full   the paper's setting (the default)
    small  a CPU-sized run of the same model family (minutes to an hour on a laptop)
    tiny   a smoke test that runs in seconds; it also shrinks the model
- Long Range Arena: `FAMILIES` (model family -> mixer), `LraTask` (one row of the LRA table) and
  `task_config`, the locked config of a task for `family[,size]`.
- Vision: `vision_config`, `vit_model` / `hvt_model` (config.model of the ViT family) and
  `deit_recipe`. PoNet transfer (pre-training, GLUE, long text): configs_lib/bert.py.

Configs hold numbers and names only: this file imports no model code. Model sizes the data
decides (vocabulary, classes, sequence length) are placeholders filled from the dataset when a
run starts (train/setup.py).

The argument string of an LRA task config is `family[,size][,protocol]` (words in any order):
  family:   transformer | linear | linear_reference | ponet | adamra | contextpool | msac
            (the token mixer)
  size:     full | small | tiny (above)
  protocol: ours (the default) | reference (the LRA code PoNet and AdaMRA ran, as far as it can
            be followed here: `reference_protocol`, docs/papers/lra.md)
  stage:    spt: self-pretraining on the task's own inputs (`self_pretraining`), the run that
            fine-tuning starts from; spt_causal: the same by next-token prediction (causal
            mixers); without either, the task itself
Model and optimizer defaults are the LRA settings of PoNet / AdaMRA (Nystromformer's LRA code,
docs/papers/lra.md): 2 pre-LN layers, dim 64, FFN 128, 2 heads, learned positions, dropout 0.1,
mean pooling, head Linear(64,128)-ReLU-Linear(128,C); AdamW (0.9, 0.999, eps 1e-6), no clipping,
no weight decay, one-cycle linear schedule. Each task file sets its batch size, learning rate,
warmup and steps from the table in docs/papers/lra.md.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence, Union

import ml_collections
from ml_collections import config_dict

from poolformers_jax.data import get_data_config


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
      cycle_momentum=False,      # one_cycle: beta1 0.95 -> 0.85 -> 0.95 (PyTorch OneCycleLR default)
      warmup_steps=0,            # linear warmup from 0 (one_cycle: from peak / 25)
      grad_clip_norm=0.0,        # 0 = no clipping
      grad_accum_steps=1,        # optax.MultiSteps: one update per k steps; steps count micro-batches
  ))
  config.label_smoothing = 0.0
  config.param_init = 'default'          # 'torch': PyTorch's module defaults (train/param_init.py)
  # DeiT's batch mixing for image classification (train/mixing.py); both alphas 0 = off.
  config.mixup = ml_collections.ConfigDict(dict(mixup_alpha=0.0, cutmix_alpha=0.0,
                                                switch_prob=0.5))
  config.batch_size = 32                 # global, over all processes and devices
  # Length-grouped micro-batches (train/length_buckets.py, docs/training.md): each global batch
  # is sorted by real length, split into micro-batches of `micro_batch_size` examples (rounded up
  # to the device count), each cut to a multiple of `multiple` tokens; their summed gradients
  # make ONE update, the same as the whole batch's to float rounding (softmax / ContextPool LRA
  # encoders; exact with dropout off, since dropout masks follow the batch's shape). Evaluation
  # batches are then length-sorted and cut the same way. multiple=0: off (one uncut batch).
  config.length_buckets = ml_collections.ConfigDict(dict(multiple=0, micro_batch_size=8))
  config.eval_batch_size = 0             # global; 0 = batch_size
  config.num_train_steps = 1000          # 0: nothing to train (init_from, then evaluate)
  config.log_every_steps = 100           # every N steps; 0 or less = only at the end
  config.eval_every_steps = 1000         # on validation; the best checkpoint is kept
  config.eval_num_batches = 0            # 0: all of validation, exactly; N: N eval batches of an
                                         # endless reshuffled validation stream (LRA reference)
  config.test_drop_last = False          # True: test on the first N - N % eval batch size examples
  config.checkpoint_every_steps = 1000
  config.keep_checkpoints = 2            # latest checkpoints kept (the best is kept apart)
  config.best_metric = 'accuracy'        # a validation metric of the task
  config.best_mode = 'max'               # 'max' | 'min'
  config.final_test = True               # evaluate the best checkpoint on test at the end
  config.init_from = ''                  # workdir / checkpoint: start from its parameters
  config.init_from_fresh = ''            # regex of parameter names kept freshly initialised
  config.init_from_allow_missing = ''    # regex of names the checkpoint may lack (a new head)
  config.num_devices = -1                # -1 = all local devices
  config.progress_bar = True
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


# ----------------------------------------------------------------------------- arguments

@dataclasses.dataclass(frozen=True)
class Numbered:
  """The words `<prefix><n>` (e.g. L8) as one choice of a `parse_words` slot."""
  prefix: str

  def __contains__(self, word: object) -> bool:
    return (isinstance(word, str) and word.startswith(self.prefix)
            and word[len(self.prefix):].isdigit())

  def __repr__(self) -> str:
    return f'{self.prefix}<n>'

  def number(self, word: Optional[str]) -> Optional[int]:
    return int(word[len(self.prefix):]) if word else None


Choices = Union[Sequence[str], Numbered]


def parse_words(arg: Optional[str], slots: Mapping[str, tuple[str, Choices]],
                example: str) -> dict[str, Optional[str]]:
  """'ponet,small' -> {'family': 'ponet', 'size': 'small'}: each comma-separated word fills the
  slot whose choices hold it (later words win); unfilled slots are None.

  slots: slot -> (what it is, its choices), e.g. {'size': ('a size', SIZES)}; choices are words
  or `Numbered('L')` (L1, L2, ...). A word no slot holds fails with one line naming every slot's
  choices and an `example`.
  """
  filled: dict[str, Optional[str]] = dict.fromkeys(slots)
  for word in filter(None, (arg or '').replace(' ', '').split(',')):
    slot = next((s for s, (_, choices) in slots.items() if word in choices), None)
    if slot is None:
      show = lambda c: repr(c) if isinstance(c, Numbered) else str(list(c))
      what = [f'{desc} {show(choices)}' for desc, choices in slots.values()]
      alternatives = (f'neither {what[0]} nor {what[1]}' if len(what) == 2 else
                      'not ' + ', '.join(what[:-1]) + f' or {what[-1]}' if len(what) > 2 else
                      f'not {what[0]}')
      kinds = ' / '.join(desc.split(' ', 1)[-1] for desc, _ in slots.values())
      raise ValueError(f'unknown {kinds} {word!r}: config argument {word!r} is {alternatives}; '
                       f'e.g. {example}.')
    filled[slot] = word
  return filled


# ----------------------------------------------------------------------------- size words

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


# ----------------------------------------------------------------------------- Long Range Arena

# model family -> (registered mixer name, per-family mixer options)
FAMILIES = {
    'transformer': ('softmax', {}),
    'linear': ('linear', {}),
    # The LRA reference code's linear attention (no normaliser, L^(-1/4) scaling): docs/papers/lra.md
    'linear_reference': ('linear', {'normalizer': 'padded_length'}),
    'ponet': ('ponet', {'segment_num': 64}),
    # router_gate 'probability' (Switch) or 'straight_through': docs/papers/adamra.md
    'adamra': ('adamra', {'router_gate': 'probability'}),
    # AdaMRA's Eq. 8 as written: routed heads summed unscaled (forward), straight-through gradient
    'adamra_eq8': ('adamra', {'router_gate': 'straight_through'}),
    # placement 'mixer_input' or 'block_output': docs/results/contextpool_placement.md
    'contextpool': ('contextpool', {'placement': 'mixer_input'}),
    'msac': ('msac', {'heads': 'full'}),   # MSAC Sec. 2.1 heads, or 'split'
}


PROTOCOLS = ('ours', 'reference')
# self-pretraining on the task's own inputs (data/masking.py): masked tokens, next tokens
STAGES = ('spt', 'spt_causal')


def parse_arg(arg: str | None, default_family: str = 'transformer',
              default_size: str = 'full') -> tuple[str, str, str, str]:
  """'ponet,small,reference' -> ('ponet', 'small', 'reference', 'task'); 'ponet,spt' -> stage
  'spt'. Unknown words fail with the valid choices. The protocol defaults to 'ours', the stage to
  'task' (training on the task itself)."""
  words = parse_words(arg, {'family': ('a model family', sorted(FAMILIES)), 'size': SIZE_SLOT,
                            'protocol': ('a protocol', PROTOCOLS),
                            'stage': ('a stage', STAGES)},
                      example='configs/lra_listops.py:ponet,small or :ponet,reference or :ponet,spt')
  return (words['family'] or default_family, words['size'] or default_size,
          words['protocol'] or 'ours', words['stage'] or 'task')


def model_config(family: str, *, retrieval: bool = False) -> ml_collections.ConfigDict:
  mixer, mixer_kwargs = FAMILIES[family]
  return ml_collections.ConfigDict(dict(
      name='lra_dual_encoder' if retrieval else 'lra_encoder',
      mixer=mixer,
      mixer_kwargs=ml_collections.ConfigDict(dict(mixer_kwargs)),
      dim=64, num_layers=2, num_heads=2, mlp_dim=128, head_hidden_dim=128,
      dropout_rate=0.1, attention_dropout_rate=0.1,
      pooling='mean',                       # 'mean' (real tokens) | 'mean_padded' (reference) | 'cls'
      activation='gelu',                    # the MLP's; 'gelu_exact' (erf) is PyTorch's nn.GELU()
      layer_norm_epsilon=1e-6,              # PyTorch's nn.LayerNorm: 1e-5
      dtype='float32',                      # 'bfloat16': bf16 compute, float32 parameters
      # Filled from the dataset (data.get_dataset_info) when left unset:
      vocab_size=config_dict.placeholder(int),
      max_length=config_dict.placeholder(int),
      num_classes=config_dict.placeholder(int),
  ))


@dataclasses.dataclass(frozen=True)
class LraTask:
  """One row of the LRA table in docs/papers/lra.md, plus the lengths of the smaller sizes."""
  data: str                  # data.get_data_config name
  length: int                # paper's sequence length (per document for retrieval)
  batch_size: int
  warmup_steps: int
  num_train_steps: int
  segment_num: int           # PoNet's LRA segment count at `length`
  small_length: int
  tiny_length: int
  eval_every_steps: int = 1000
  eval_batches: int = 0      # the reference's num_eval_steps (lra_config.py): dev batches per eval
  retrieval: bool = False
  mask_rate: float = 0.15    # self-pretraining: share of real tokens masked (Amos et al.)


def reference_protocol(config: ml_collections.ConfigDict, family: str, task: LraTask,
                       size: str) -> None:
  """What the LRA code of Nystromformer / PoNet does that our default does not, where it can be
  followed exactly here (each line: docs/papers/lra.md, 'Reference protocol'). Not followed:
  fp16 autocast with a GradScaler, and its unseeded data orders."""
  config.model.update(pooling='mean_padded',          # model.py: (LN(x) * mask).mean(dim=1)
                      activation='gelu_exact',        # nn.GELU()
                      layer_norm_epsilon=1e-5)        # nn.LayerNorm
  if family == 'transformer':                         # attention.py: dropout on softmax(dot)
    config.model.mixer_kwargs.dropout_on = 'weights'
  config.param_init = 'torch'                         # nn.Linear defaults, normal_(std=0.02)
  config.optimizer.cycle_momentum = True              # OneCycleLR's default cycle_momentum=True
  config.test_drop_last = True                        # DataLoader(test, drop_last=True)
  if size == 'full':                                  # num_eval_steps batches of the dev stream
    config.eval_num_batches = task.eval_batches


def task_config(task: LraTask, arg: str | None,
                size_overrides: dict[str, Callable[[ml_collections.ConfigDict], None]] | None = None
                ) -> ml_collections.ConfigDict:
  """The locked config of `task` for `arg` = 'family[,size][,protocol]' (no argument:
  transformer,small).

  The settings of PoNet / AdaMRA on LRA (Nystromformer's LRA code): 2 pre-LN layers, dim 64,
  FFN 128, 2 heads, learned positions, dropout 0.1, mean pooling, head
  Linear(64,128)-ReLU-Linear(128,C); AdamW (0.9, 0.999, eps 1e-6), no clipping, no weight decay,
  one-cycle linear schedule; batch, warmup and steps from `task`.
  `small` keeps the model and shortens sequences, steps and batch for a CPU; `tiny` also shrinks
  the model. PoNet's segment count scales with the length. A task file can change more per size
  with `size_overrides[size](config)`. `reference` then applies `reference_protocol`.
  """
  family, size, protocol, stage = parse_arg(arg, default_size='full' if arg else 'small')
  config = base_config(task.data)
  config.model = model_config(family, retrieval=task.retrieval)
  config.optimizer.update(learning_rate=1e-4, eps=1e-6, schedule='one_cycle',
                          warmup_steps=task.warmup_steps)
  length = {'full': task.length, 'small': task.small_length, 'tiny': task.tiny_length}[size]
  config.data.max_length = length
  config.batch_size = task.batch_size
  config.num_train_steps = task.num_train_steps
  config.log_every_steps = 50
  config.eval_every_steps = config.checkpoint_every_steps = task.eval_every_steps
  if family == 'ponet':
    config.model.mixer_kwargs.segment_num = max(task.segment_num * length // task.length, 1)
  shrink_run(config, size, small_batch_size=32)
  if size == 'small':
    config.optimizer.learning_rate = 1e-3
  if size == 'tiny':
    config.model.update(dim=32, mlp_dim=64, head_hidden_dim=32)
  if size in (size_overrides or {}):
    size_overrides[size](config)
  if protocol == 'reference':
    reference_protocol(config, family, task, size)
  if stage in STAGES:
    self_pretraining(config, task, causal=stage == 'spt_causal')
  config.lock()
  return config


def self_pretraining(config: ml_collections.ConfigDict, task: LraTask,
                     causal: bool = False) -> None:
  """The `spt` word: the same encoder (every mixer setting, size, optimizer and schedule)
  trained to predict `task.mask_rate` of its own masked input tokens (data/masking.py, Amos et
  al. 2024); the best checkpoint is the one with the best masked-token accuracy on validation.
  `spt_causal` (`causal`): each next token from the ones before it instead, the same encoder's
  mixers causal (`lra_causal_lm`; mixers without a causal form are refused).
  Fine-tune from it with the task's config and `init_from` (its 'mlm_head' / 'lm_head' is
  ignored, the classifier's 'head' starts fresh): `reproduce lra --spt` runs both stages."""
  config.model.name = 'lra_causal_lm' if causal else 'lra_masked_lm'
  if causal:
    config.data.next_tokens = True
  else:
    config.data.mask_rate = task.mask_rate
  config.final_test = False   # the fine-tuned run reports test accuracy


# ----------------------------------------------------------------------------------- vision

IMAGENET_TRAIN_SIZE = 1_281_167


def epochs_to_steps(epochs: float, batch_size: int, train_size: int = IMAGENET_TRAIN_SIZE) -> int:
  return int(epochs * train_size // batch_size)


def vit_model(hidden_dim: int, depth: int, num_heads: int, *, patch_size: int = 16,
              image_size: int = 224, classifier: str = 'token', mixer: str = 'softmax',
              drop_path_rate: float = 0.1) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      name='vit', num_classes=config_dict.placeholder(int),   # from the dataset
      image_size=image_size, patch_size=patch_size,
      hidden_dim=hidden_dim, depth=depth, num_heads=num_heads, mlp_ratio=4.0,
      classifier=classifier, mixer=mixer,
      # ContextPool placement: 'mixer_input' or 'block_output' (docs/papers/context_pool.md).
      mixer_kwargs=ml_collections.ConfigDict(
          {'placement': 'mixer_input'} if mixer == 'contextpool' else {}),
      dropout_rate=0.0, attention_dropout_rate=0.0, drop_path_rate=drop_path_rate,
      dtype='float32'))


def hvt_model(hidden_dim: int, num_heads: int, num_stages: int, *, pool_method: str = 'max',
              pool_2d: bool = False, patch_size: int = 16,
              image_size: int = 224) -> ml_collections.ConfigDict:
  c = vit_model(hidden_dim, 12, num_heads, patch_size=patch_size, image_size=image_size,
                classifier='mean')
  del c['classifier']   # HVT has no class token: the 'hvt' model always uses the mean head
  c.name = 'hvt'
  c.num_stages = num_stages
  c.pool_method = pool_method
  c.pool_kernel_size = 3
  c.pool_stride = 2
  c.pool_2d = pool_2d
  return c


def deit_recipe(config, weight_decay: float = 0.025, train_size: int = IMAGENET_TRAIN_SIZE) -> None:
  """DeiT's recipe with HVT's weight decay (0.025; DeiT's own is 0.05)."""
  opt = config.optimizer
  opt.learning_rate = 5e-4 * config.batch_size / 512
  opt.weight_decay = weight_decay
  opt.schedule = 'cosine'
  opt.warmup_steps = epochs_to_steps(5, config.batch_size, train_size)
  opt.grad_clip_norm = 0.0
  config.label_smoothing = 0.1
  config.num_train_steps = epochs_to_steps(300, config.batch_size, train_size)
  # DeiT's augmentations (train/mixing.py, data/vision.py, data/randaugment.py, data/pipeline.py).
  config.mixup.update(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5)
  config.data.random_erasing = 0.25
  config.data.rand_augment = 'rand-m9-mstd0.5-inc1'
  config.data.repeated_augmentation = 3


def vision_config(data_name: str, model: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The base of the image classifiers: batch 1024, AdamW, cosine, label smoothing 0.1; one
  image size (overriding --config.model.image_size also resizes the data)."""
  config = base_config(data_name)
  config.model = model
  config.optimizer.update(weight_decay=0.05, schedule='cosine')
  config.label_smoothing = 0.1
  config.batch_size = 1024
  config.num_train_steps = 0             # the recipe sets it
  config.eval_every_steps = config.checkpoint_every_steps = 5000
  config.final_test = False              # ImageNet: the validation split is the reported number
  if 'image_size' in model:
    config.data.image_size = model.get_ref('image_size')
  return config
