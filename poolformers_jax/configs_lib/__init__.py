"""What the config files share (big_vision's configs/common.py): they import it by module path.

- `parse_words`: THE parser of config arguments (`configs/x.py:word,word`) for every config file.
- Long Range Arena: `FAMILIES` (model family -> mixer), `LraTask` (one row of the LRA table) and
  `task_config`, the locked config of a task for `family[,size]`.
- Vision: `vision_base_config`, `vit_model` / `hvt_model` (config.model of the ViT family) and
  `deit_recipe`.

Configs hold numbers and names only: this file imports no model code.

The argument string of an LRA task config is `family[,size]` (also `size` alone):
  family: transformer | linear | ponet | adamra | contextpool | msac  (the token mixer)
  size:   full (the paper's setting) | small (CPU-sized) | runlocal (a smoke test, seconds)
Model and optimizer defaults are the LRA settings of PoNet / AdaMRA (Nystromformer's LRA code,
docs/papers/lra.md): 2 pre-LN layers, dim 64, FFN 128, 2 heads, learned positions, dropout 0.1,
mean pooling, head Linear(64,128)-ReLU-Linear(128,C); AdamW (0.9, 0.999, eps 1e-6), no clipping,
no weight decay, one-cycle linear schedule. Each task file sets its batch size, learning rate,
warmup and steps from the table in docs/papers/lra.md.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

import ml_collections
from ml_collections import config_dict

from poolformers_jax.data import get_data_config


def parse_words(arg: Optional[str], slots: Mapping[str, tuple[str, Sequence[str]]],
                example: str) -> dict[str, Optional[str]]:
  """'ponet,small' -> {'family': 'ponet', 'size': 'small'}: each comma-separated word fills the
  slot whose choices hold it (later words win); unfilled slots are None.

  slots: slot -> (what it is, its choices), e.g. {'size': ('a size', ('full', 'small'))}.
  A word no slot holds fails with one line naming every slot's choices and an `example`.
  """
  filled: dict[str, Optional[str]] = dict.fromkeys(slots)
  for word in filter(None, (arg or '').replace(' ', '').split(',')):
    slot = next((s for s, (_, choices) in slots.items() if word in choices), None)
    if slot is None:
      what = [f'{desc} {list(choices)}' for desc, choices in slots.values()]
      alternatives = (f'neither {what[0]} nor {what[1]}' if len(what) == 2 else
                      'not ' + ', '.join(what[:-1]) + f' or {what[-1]}' if len(what) > 2 else
                      f'not {what[0]}')
      kinds = ' / '.join(desc.split(' ', 1)[-1] for desc, _ in slots.values())
      raise ValueError(f'unknown {kinds} {word!r}: config argument {word!r} is {alternatives}; '
                       f'e.g. {example}.')
    filled[slot] = word
  return filled


# ----------------------------------------------------------------------------- Long Range Arena

# model family -> (registered mixer name, per-family mixer options)
FAMILIES = {
    'transformer': ('softmax', {}),
    'linear': ('linear', {}),
    'ponet': ('ponet', {'segment_num': 64}),
    'adamra': ('adamra', {}),
    # placement 'mixer_input' or 'block_output': docs/results/contextpool_placement.md
    'contextpool': ('contextpool', {'placement': 'mixer_input'}),
    'msac': ('msac', {'heads': 'full'}),   # MSAC Sec. 2.1 heads, or 'split'
}
SIZES = ('full', 'small', 'runlocal')


def parse_arg(arg: str | None, default_family: str = 'transformer',
              default_size: str = 'full') -> tuple[str, str]:
  """'ponet,small' -> ('ponet', 'small'); unknown words fail with the valid choices."""
  words = parse_words(arg, {'family': ('a model family', sorted(FAMILIES)),
                            'size': ('a size', SIZES)},
                      example='configs/lra_listops.py:ponet,small')
  return words['family'] or default_family, words['size'] or default_size


def model_config(family: str, *, retrieval: bool = False) -> ml_collections.ConfigDict:
  mixer, mixer_kwargs = FAMILIES[family]
  return ml_collections.ConfigDict(dict(
      name='lra_dual_encoder' if retrieval else 'lra_encoder',
      mixer=mixer,
      mixer_kwargs=ml_collections.ConfigDict(dict(mixer_kwargs)),
      dim=64, num_layers=2, num_heads=2, mlp_dim=128, head_hidden_dim=128,
      dropout_rate=0.1, attention_dropout_rate=0.1,
      pooling='mean',                       # 'mean' (real tokens) | 'mean_padded' (reference) | 'cls'
      dtype='float32',                      # 'bfloat16': bf16 compute, float32 parameters
      # Filled from the dataset (data.get_dataset_info) when left unset:
      vocab_size=config_dict.placeholder(int),
      max_length=config_dict.placeholder(int),
      num_classes=config_dict.placeholder(int),
  ))


def optimizer_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      learning_rate=1e-4,
      b1=0.9, b2=0.999, eps=1e-6,
      weight_decay=0.0,          # masked off biases, norms and position embeddings
      schedule='one_cycle',      # constant | cosine | linear | one_cycle
      cycle_momentum=False,      # one_cycle: beta1 0.95 -> 0.85 -> 0.95 (PyTorch OneCycleLR default)
      warmup_steps=1000,
      grad_clip_norm=0.0,        # 0 = no clipping
      grad_accum_steps=1,        # optax.MultiSteps; num_train_steps counts micro-batches
  ))


def get_lra_config(data_config: ml_collections.ConfigDict, family: str,
                   retrieval: bool = False) -> ml_collections.ConfigDict:
  """Everything but the task's numbers; the task file fills those in and locks the config."""
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = data_config
  config.model = model_config(family, retrieval=retrieval)
  config.optimizer = optimizer_config()
  config.label_smoothing = 0.0
  config.batch_size = 32                 # global, over all processes and devices
  config.eval_batch_size = 64
  config.num_train_steps = 5000
  config.log_every_steps = 50
  config.eval_every_steps = 500          # on validation; the best checkpoint is kept
  config.checkpoint_every_steps = 500
  config.keep_checkpoints = 2            # latest checkpoints kept (the best is kept apart)
  config.best_metric = 'accuracy'
  config.best_mode = 'max'
  config.final_test = True               # evaluate the best checkpoint on test at the end
  config.init_from = ''                  # workdir / checkpoint: start from its parameters
  config.init_from_fresh = ''            # regex of parameter names kept freshly initialised
  config.num_devices = -1                # -1 = all local devices
  config.progress_bar = True
  config.profile_steps = ()              # (first, last): jax.profiler trace in DIR/profile
  return config


@dataclasses.dataclass(frozen=True)
class LraTask:
  """One row of the LRA table in docs/papers/lra.md, plus the lengths of the CPU-sized variants."""
  data: str                  # data.get_data_config name
  length: int                # paper's sequence length (per document for retrieval)
  batch_size: int
  warmup_steps: int
  num_train_steps: int
  segment_num: int           # PoNet's LRA segment count at `length`
  small_length: int
  runlocal_length: int
  eval_every_steps: int = 1000
  retrieval: bool = False


def task_config(task: LraTask, arg: str | None,
                size_overrides: dict[str, Callable[[ml_collections.ConfigDict], None]] | None = None
                ) -> ml_collections.ConfigDict:
  """The locked config of `task` for `arg` = 'family[,size]' (no argument: transformer,small).

  `small` keeps the model and shortens sequences, steps and batch for a CPU; `runlocal` also
  shrinks the model (a smoke test). PoNet's segment count scales with the length. A task file
  can change more per size with `size_overrides[size](config)`.
  """
  family, size = parse_arg(arg, default_size='full' if arg else 'small')
  config = get_lra_config(get_data_config(task.data), family, retrieval=task.retrieval)
  length = {'full': task.length, 'small': task.small_length, 'runlocal': task.runlocal_length}[size]
  config.data.max_length = length
  config.batch_size = config.eval_batch_size = task.batch_size
  config.optimizer.warmup_steps = task.warmup_steps
  config.num_train_steps = task.num_train_steps
  config.eval_every_steps = config.checkpoint_every_steps = task.eval_every_steps
  if family == 'ponet':
    config.model.mixer_kwargs.segment_num = max(task.segment_num * length // task.length, 1)
  if size == 'small':
    config.batch_size = config.eval_batch_size = 32
    config.optimizer.learning_rate = 1e-3
    config.optimizer.warmup_steps = 100
    config.num_train_steps = 2000
    config.eval_every_steps = config.checkpoint_every_steps = 500
  shrink_for_cpu(config, size)
  (size_overrides or {}).get(size, lambda c: None)(config)
  config.lock()
  return config


def shrink_for_cpu(config: ml_collections.ConfigDict, size: str) -> None:
  """Sizes other than 'full': fewer steps and a smaller model for a laptop CPU."""
  if size == 'runlocal':
    config.model.update(dim=32, mlp_dim=64, head_hidden_dim=32)
    config.batch_size = 8
    config.eval_batch_size = 16
    config.num_train_steps = 20
    config.optimizer.warmup_steps = 2
    config.log_every_steps = 5
    config.eval_every_steps = 10
    config.checkpoint_every_steps = 10


# ----------------------------------------------------------------------------------- vision

IMAGENET_TRAIN_SIZE = 1_281_167


def epochs_to_steps(epochs: float, batch_size: int, train_size: int = IMAGENET_TRAIN_SIZE) -> int:
  return int(epochs * train_size // batch_size)


def vit_model(hidden_dim: int, depth: int, num_heads: int, *, patch_size: int = 16,
         image_size: int = 224, classifier: str = 'token', mixer: str = 'softmax',
         drop_path_rate: float = 0.1, num_classes: int = 1000) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      name='vit', num_classes=num_classes, image_size=image_size, patch_size=patch_size,
      hidden_dim=hidden_dim, depth=depth, num_heads=num_heads, mlp_ratio=4.0,
      classifier=classifier, mixer=mixer,
      # ContextPool placement: 'mixer_input' or 'block_output' (docs/papers/context_pool.md).
      mixer_kwargs=ml_collections.ConfigDict(
          {'placement': 'mixer_input'} if mixer == 'contextpool' else {}),
      dropout_rate=0.0, attention_dropout_rate=0.0, drop_path_rate=drop_path_rate,
      dtype='float32'))


def hvt_model(hidden_dim: int, num_heads: int, num_stages: int, *, pool_method: str = 'max',
         pool_2d: bool = False, patch_size: int = 16, image_size: int = 224,
         num_classes: int = 1000) -> ml_collections.ConfigDict:
  c = vit_model(hidden_dim, 12, num_heads, patch_size=patch_size, image_size=image_size,
                classifier='mean', num_classes=num_classes)
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
  config.mixup = ml_collections.ConfigDict(dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5))
  config.data.random_erasing = 0.25
  config.data.rand_augment = 'rand-m9-mstd0.5-inc1'
  config.data.repeated_augmentation = 3


def vision_base_config(data_name: str = 'imagenet2012') -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = get_data_config(data_name)
  config.model = ml_collections.ConfigDict()
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.05, schedule='cosine',
      warmup_steps=0, grad_clip_norm=0.0, grad_accum_steps=1))
  config.label_smoothing = 0.1
  config.batch_size = 1024               # global, over all processes and devices
  config.eval_batch_size = 1024
  config.num_train_steps = 0
  config.log_every_steps = 100
  config.eval_every_steps = 5000
  config.checkpoint_every_steps = 5000
  config.keep_checkpoints = 2
  config.best_metric = 'accuracy'
  config.best_mode = 'max'
  config.final_test = False              # ImageNet: the validation split is the reported number
  config.init_from = ''                  # workdir / checkpoint: start from its parameters
  config.init_from_fresh = ''            # regex of parameter names kept freshly initialised
  config.num_devices = -1
  config.progress_bar = True
  return config
