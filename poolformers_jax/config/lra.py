"""Long Range Arena: `FAMILIES` (model family -> mixer), `LraTask` (one row of the LRA table) and
`task_config`, the locked config of a task for `family[,size][,protocol][,stage]`.

The argument string of an LRA task config is `family[,size][,protocol]...` (words in any order):
  family:   transformer | linear | linear_reference | ponet | adamra | contextpool | msac
            (the token mixer)
  size:     full | small | tiny (config/defaults.py)
  model:    6x512: Amos et al.'s model (6 layers, width 512, 8 heads, FF 2048) instead of the LRA
            papers' 2 x 64
  positions: learned (the default) | sinusoidal | rotary (config.model.positions)
  protocol: ours (the default) | reference (the LRA code PoNet and AdaMRA ran, as far as it can
            be followed here: `reference_protocol`, docs/papers/lra.md)
  stage:    spt / spt_causal: self-pretraining on the task's own inputs (`self_pretraining`);
            finetune / finetune_causal: the task, from such a run (--config.init_from=<its
            workdir>; the classifier head is new; a pre-training still at its data's unigram
            rate is refused, trainer/init_check.py); without any, the task from scratch
  recipe:   amos: the stage with Amos et al.'s schedule (`amos_recipe`)
  AdaMRA's open choices (families adamra, adamra_eq8; docs/papers/adamra.md):
            rates<n>-<n>-...: compression rates 1/n, one resolution head each (rates2-8-32 is
            the default 1/2, 1/8, 1/32); subheads<n>: S subheads per head (model.num_heads)
  mixer_dropout<p>: the mixer's dropout, p % (model.attention_dropout_rate; default 10)
Model and optimizer defaults are the LRA settings of PoNet / AdaMRA (Nystromformer's LRA code,
docs/papers/lra.md): 2 pre-LN layers, dim 64, FFN 128, 2 heads, learned positions, dropout 0.1,
mean pooling, head Linear(64,128)-ReLU-Linear(128,C); AdamW (0.9, 0.999, eps 1e-6), no clipping,
no weight decay, one-cycle linear schedule. Each task file sets its batch size, learning rate,
warmup and steps from the table in docs/papers/lra.md.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypedDict

import ml_collections
from ml_collections import config_dict

from poolformers_jax.config.defaults import SIZE_SLOT, base_config, shrink_run
from poolformers_jax.config.words import Numbered, NumberList, parse_words

# model family -> (registered mixer name, per-family mixer options)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    'transformer': ('softmax', {}),
    'linear': ('linear', {}),
    # The LRA reference code's linear attention (no normaliser, L^(-1/4) scaling)
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
FINETUNE_STAGES = ('finetune', 'finetune_causal')
POSITION_WORDS = ('learned', 'sinusoidal', 'rotary')
MODEL_WORDS = ('6x512',)
RECIPES = ('amos',)


RATES, SUBHEADS, MIXER_DROPOUT = (NumberList('rates'), Numbered('subheads'),
                                  Numbered('mixer_dropout'))
ADAMRA_FAMILIES = ('adamra', 'adamra_eq8')


def _words(arg: str | None) -> dict[str, str | None]:
  return parse_words(arg, {'family': ('a model family', sorted(FAMILIES)), 'size': SIZE_SLOT,
                           'protocol': ('a protocol', PROTOCOLS),
                           'stage': ('a stage', STAGES + FINETUNE_STAGES),
                           'model': ('a model size', MODEL_WORDS),
                           'positions': ('a positions word', POSITION_WORDS),
                           'recipe': ('a recipe', RECIPES),
                           'rates': ('AdaMRA rates', RATES),
                           'subheads': ('AdaMRA subheads', SUBHEADS),
                           'mixer_dropout': ('a mixer dropout %', MIXER_DROPOUT)},
                     example='configs/lra_listops.py:ponet,small or :ponet,reference or :ponet,spt '
                     'or :adamra,small,rates4-8-16-32,subheads2,mixer_dropout0')


class Words(TypedDict):
  """parse_arg's result: the first four slots always filled, the others None when not given."""
  family: str
  size: str
  protocol: str
  stage: str
  model: str | None
  positions: str | None
  recipe: str | None
  rates: str | None
  subheads: str | None
  mixer_dropout: str | None


def parse_arg(arg: str | None, default_family: str = 'transformer',
              default_size: str = 'full') -> Words:
  """'ponet,small,reference' -> {'family': 'ponet', 'size': 'small', 'protocol': 'reference',
  'stage': 'task', 'model': None, 'positions': None, 'recipe': None}; the stage 'task' is
  training on the task itself."""
  words = _words(arg)
  return Words(family=words['family'] or default_family, size=words['size'] or default_size,
               protocol=words['protocol'] or 'ours', stage=words['stage'] or 'task',
               model=words['model'], positions=words['positions'], recipe=words['recipe'],
               rates=words['rates'], subheads=words['subheads'],
               mixer_dropout=words['mixer_dropout'])


def mixer_words(config: ml_collections.ConfigDict, family: str, arg: str | None) -> None:
  """The words rates<n>-<n>-..., subheads<n> (AdaMRA families only) and mixer_dropout<p>."""
  words = _words(arg)
  for slot in ('rates', 'subheads'):
    if words[slot] and family not in ADAMRA_FAMILIES:
      raise ValueError(f'config argument {words[slot]!r} sets AdaMRA\'s {slot}, but the family is '
                       f'{family!r}; use it with {" or ".join(ADAMRA_FAMILIES)}.')
  rates = RATES.numbers(words['rates'])
  if rates is not None:
    config.model.mixer_kwargs.compression_rates = tuple(1 / n for n in rates)
  subheads = SUBHEADS.number(words['subheads'])
  if subheads is not None:
    config.model.num_heads = subheads
  percent = MIXER_DROPOUT.number(words['mixer_dropout'])
  if percent is not None:
    if percent >= 100:
      raise ValueError(f'config argument {words["mixer_dropout"]!r}: the dropout is in percent, '
                       'below 100; e.g. mixer_dropout0 or mixer_dropout10.')
    config.model.attention_dropout_rate = percent / 100


def model_config(family: str, *, retrieval: bool = False) -> ml_collections.ConfigDict:
  mixer, mixer_kwargs = FAMILIES[family]
  return ml_collections.ConfigDict(dict(
      name='lra_dual_encoder' if retrieval else 'lra_encoder',
      mixer=mixer,
      mixer_kwargs=ml_collections.ConfigDict(dict(mixer_kwargs)),
      dim=64, num_layers=2, num_heads=2, mlp_dim=128, head_hidden_dim=128,
      dropout_rate=0.1, attention_dropout_rate=0.1,
      pooling='mean',          # 'mean' (real tokens) | 'mean_padded' (reference) | 'cls' | 'last'
      positions='learned',                  # | 'sinusoidal' | 'rotary' | 'none' (layers/common.py)
      activation='gelu',                    # the MLP's; 'gelu_exact' (erf) is PyTorch's nn.GELU()
      layer_norm_epsilon=1e-6,              # PyTorch's nn.LayerNorm: 1e-5
      dtype='float32',                      # 'bfloat16': bf16 compute, float32 parameters
      remat='none',                         # 'full' | 'dots': recompute blocks (docs/training.md)
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
  followed exactly (docs/papers/lra.md, 'Reference protocol'; not followed: fp16 autocast with a
  GradScaler, unseeded data orders)."""
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
  """The locked config of `task` for `arg`, the words of the module docstring (no argument:
  transformer,small). `small` keeps the model and shortens sequences, steps and batch for a CPU;
  `tiny` also shrinks the model; PoNet's segment count scales with the length. A task file can
  change more per size with `size_overrides[size](config)`."""
  words = parse_arg(arg, default_size='full' if arg else 'small')
  family, size, protocol, stage = words['family'], words['size'], words['protocol'], words['stage']
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
  if 'segment_num' in config.model.mixer_kwargs:   # the paper's segments, scaled to the length
    config.model.mixer_kwargs.segment_num = max(task.segment_num * length // task.length, 1)
  shrink_run(config, size, small_batch_size=32)
  if size == 'small':
    config.optimizer.learning_rate = 1e-3
  if size == 'tiny':
    config.model.update(dim=32, mlp_dim=64, head_hidden_dim=32)
  overrides = size_overrides or {}
  if size in overrides:
    overrides[size](config)
  if words['model'] == '6x512':   # Amos et al.'s Transformer (their configs/model/transformer.yaml)
    config.model.update(num_layers=6, dim=512, num_heads=8, mlp_dim=2048)
  if words['positions']:
    config.model.positions = words['positions']
  if protocol == 'reference':
    reference_protocol(config, family, task, size)
  if stage in STAGES:
    self_pretraining(config, task, causal=stage == 'spt_causal')
  if stage in FINETUNE_STAGES:
    config.init_from_allow_missing = '^head/'       # the classifier head is new
    config.init_from_refuse_unlearned = True
    if stage == 'finetune_causal':   # only the last token has seen the whole sequence
      config.model.pooling = 'last'
  if words['recipe'] == 'amos':
    amos_recipe(config, stage, size)
  mixer_words(config, family, arg)
  config.lock()
  return config


# Amos et al.'s learning rates per stage: masked tokens 1e-3, its fine-tuning 1e-4; next tokens
# 5e-4 for both (the paper's Table 4 / their configs), constant after a linear warm-up.
AMOS_LEARNING_RATES = {'spt': 1e-3, 'finetune': 1e-4, 'spt_causal': 5e-4, 'finetune_causal': 5e-4}
AMOS_WARMUP_STEPS = 2000      # at the paper setting (smaller sizes keep theirs)
AMOS_EPOCHS = 100             # pre-training length (their ListOps config: max_epochs 100)


def amos_recipe(config: ml_collections.ConfigDict, stage: str, size: str) -> None:
  """The `amos` word: Amos et al.'s schedule for a self-pretraining or fine-tuning stage:
  constant learning rate after warm-up (AMOS_LEARNING_RATES), no dropout while pre-training, and
  pre-training measured in epochs (AMOS_EPOCHS; `tiny` keeps its steps)."""
  if stage not in AMOS_LEARNING_RATES:
    raise ValueError(f"config word 'amos' is Amos et al.'s self-pretraining schedule: add a stage "
                     f'word, one of {sorted(AMOS_LEARNING_RATES)} (e.g. :transformer,spt,amos).')
  config.optimizer.update(schedule='constant', learning_rate=AMOS_LEARNING_RATES[stage])
  if size == 'full':
    config.optimizer.warmup_steps = AMOS_WARMUP_STEPS
  if stage in STAGES:
    config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
    if size != 'tiny':
      config.num_train_epochs = AMOS_EPOCHS


def self_pretraining(config: ml_collections.ConfigDict, task: LraTask,
                     causal: bool = False) -> None:
  """The `spt` word: the same encoder trained to predict `task.mask_rate` of its own masked input
  tokens (data/masking.py, Amos et al. 2024), the best checkpoint by masked-token accuracy.
  `spt_causal`: each next token from those before it, the mixers causal (`lra_causal_lm`).
  Fine-tune from it with the task's config and `init_from` (the classifier's 'head' starts
  fresh); `reproduce lra --spt` runs both stages."""
  config.model.name = 'lra_causal_lm' if causal else 'lra_masked_lm'
  if causal:
    config.data.next_tokens = True
  else:
    config.data.mask_rate = task.mask_rate
  config.final_test = False   # the fine-tuned run reports test accuracy
