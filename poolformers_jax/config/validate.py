"""Every check of a run's config against itself, the data and the devices, in one place, up front.

`check_config` runs in `make_setup` (trainer/setup.py), after the config is completed
(config/completion.py) and before any model is built or compiled; `check_eval_batch_size` for
eval.py's --batch_size. Each failure is a ConfigError (a ValueError; a batch that does not split
over the devices: data.base.process_share's divisibility check) whose message is one
line, `<what is wrong>; <what to do>`, which train.py / eval.py print as `error: ...` with exit
code 2. What the checks need of the trainer comes as plain values: the device and process counts
and the task's validation metric names (so this file imports no jax and no trainer).
Settings a mixer can only judge against the sequence length (PoNet's segment_num and
local_window, AdaMRA's compression rates, (M)SAC's windows) are checked by the layer itself,
with the same kind of line, when `make_setup` traces the model's abstract state right after
`check_config`: still before anything compiles. (ContextPool's window_size is not: a window
longer than the input is the whole input, and the decoder calls it at every length.)
"""
from __future__ import annotations

import importlib.util
import math
import numbers
import sys
from collections.abc import Sequence
from typing import Any

import ml_collections

from poolformers_jax.config.defaults import DTYPES, PARAM_INIT_SCHEMES, REMAT
from poolformers_jax.data import base as data_base
from poolformers_jax.registry import MIXERS

WRITERS = ('tensorboard', 'wandb')   # besides metrics.jsonl: trainer/writers.py

__all__ = ['DTYPES', 'ConfigError', 'check_batch_size', 'check_config', 'check_eval_batch_size']


class ConfigError(ValueError):
  """A config value that cannot work; the message says what is wrong and what to do."""


def _require(ok: bool, what: str, todo: str) -> None:
  if not ok:
    raise ConfigError(f'{what}; {todo}')


def _is_int(value: Any) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_int(config, key: str, prefix: str = '') -> None:
  value = config[key]
  _require(_is_int(value) and value >= 1,
           f'config.{prefix}{key}={value!r} must be a positive integer',
           f'set --config.{prefix}{key} to 1 or more')


def check_batch_size(batch_size: Any, what: str, *, devices: int, processes: int = 1) -> None:
  """A global batch size that splits over `processes` and the `devices` of the mesh."""
  _require(_is_int(batch_size) and batch_size >= 1, f'{what}={batch_size!r} must be a positive '
           'integer', f'set {what} to a multiple of {devices} (the number of devices)')
  data_base.process_share(batch_size, what, processes, devices=devices)


def check_eval_batch_size(batch_size: Any, *, devices: int, processes: int = 1) -> None:
  """eval.py --batch_size: None (the config's eval batch size) or a valid global batch size."""
  if batch_size is not None:
    check_batch_size(batch_size, '--batch_size', devices=devices, processes=processes)


_SIZES = ('dim', 'num_heads', 'num_layers', 'depth', 'patch_size', 'vocab_size', 'max_length',
          'num_classes', 'image_size')


def _check_model(model: ml_collections.ConfigDict, info) -> None:
  for key, value in model.items():
    if key == 'dtype':
      _require(value is None or value in DTYPES, f'config.model.dtype={value!r} is not a '
               'compute dtype of these models', f'choose one of {", ".join(DTYPES)}')
    elif key == 'remat':
      _require(value in REMAT, f'config.model.remat={value!r} is not a rematerialisation '
               'policy', f'choose one of {", ".join(REMAT)} (none: keep every activation)')
    elif _is_int(value):       # sizes and counts; some counts may be 0 (ViT num_stages)
      least = 1 if key in _SIZES or key.endswith('_dim') else 0
      bound = '>= 0' if least == 0 else 'positive'
      _require(value >= least, f'config.model.{key}={value} must be {bound}',
               f'set --config.model.{key} to {least} or more')
    elif key.endswith('_rate') and isinstance(value, float):
      _require(0.0 <= value < 1.0, f'config.model.{key}={value} must be in [0, 1)',
               f'set --config.model.{key} to a probability below 1')
  name = info.name
  given = lambda key: key in model and model[key] is not None   # fields differ by model
  if given('num_classes') and info.num_classes is not None:
    _require(model.num_classes == info.num_classes,
             f'config.model.num_classes={model.num_classes} but {name} has {info.num_classes} '
             'classes', 'remove the override (it is filled in from the data) or set '
             f'--config.model.num_classes={info.num_classes}')
  if given('vocab_size') and info.vocab_size is not None:
    _require(model.vocab_size >= info.vocab_size,
             f'config.model.vocab_size={model.vocab_size} but the token ids of {name} go up to '
             f'{info.vocab_size - 1}', 'remove the override (it is filled in from the data) or '
             f'set --config.model.vocab_size={info.vocab_size}')
  if given('max_length') and info.vocab_size is not None:
    length = info.input_shape[-1]
    _require(model.max_length >= length,
             f'config.model.max_length={model.max_length} is shorter than the inputs of {name} '
             f'({length} tokens)', f'remove the override or set --config.model.max_length={length}')
  if given('patch_size') and len(info.input_shape) == 3:
    patch, (height, width) = model.patch_size, info.input_shape[:2]
    _require(height % patch == 0 and width % patch == 0,
             f'the {height}x{width} images of {name} are not divisible by '
             f'config.model.patch_size={patch}', 'choose a patch size that divides the image size')


def _check_optimizer(opt: ml_collections.ConfigDict) -> None:
  lr = opt.learning_rate
  _require(isinstance(lr, numbers.Real) and math.isfinite(lr) and float(lr) >= 0,
           f'config.optimizer.learning_rate={lr!r} must be a finite number >= 0',
           'set --config.optimizer.learning_rate, e.g. 1e-3')
  for key in ('warmup_steps', 'grad_clip_norm', 'weight_decay'):
    value = opt[key]
    _require(isinstance(value, numbers.Real) and float(value) >= 0,
             f'config.optimizer.{key}={value!r} must be >= 0', f'set --config.optimizer.{key} '
             'to 0 (off) or more')
  _positive_int(opt, 'grad_accum_steps', 'optimizer.')


def _check_profile_steps(steps: Any) -> None:
  if not steps:
    return
  ok = (isinstance(steps, (tuple, list)) and len(steps) == 2 and all(map(_is_int, steps))
        and 0 <= steps[0] < steps[1])
  _require(ok, f'config.profile_steps={steps!r} must be (first, last) steps with first < last',
           "e.g. --config.profile_steps='(10, 20)', or () for no trace")


def _check_writers(names: Any) -> None:
  """config.writers: known writer names, and wandb installed when named."""
  given = [n.strip() for n in str(names).split(',') if n.strip()]
  for name in given:
    _require(name in WRITERS, f'config.writers names {name!r}, which is not a writer',
             f"choose from {', '.join(WRITERS)}, comma-separated ('' for none; metrics.jsonl "
             'is always written)')
  if 'wandb' in given:
    _require('wandb' in sys.modules or importlib.util.find_spec('wandb') is not None,
             "config.writers names 'wandb' but wandb is not installed",
             'pip install wandb, or leave wandb out of --config.writers')


def _check_length_buckets(config: ml_collections.ConfigDict, info, processes: int) -> None:
  """config.length_buckets (trainer/length_buckets.py): exact only where the amount of padding
  changes no real output (the mixer's traits say, for its options), and in one process (all
  processes would have to agree on every micro-batch's cut)."""
  buckets = config.length_buckets
  _require(_is_int(buckets.multiple) and buckets.multiple >= 0,
           f'config.length_buckets.multiple={buckets.multiple!r} must be an integer >= 0',
           'set it to 0 (off) or a token count such as 256')
  _positive_int(buckets, 'micro_batch_size', 'length_buckets.')
  if not buckets.multiple:
    return
  off = '--config.length_buckets.multiple=0'
  model = config.model
  _require(model.get('name') == 'lra_encoder' and info.task == 'classification',
           f'config.length_buckets cuts the token sequences of the LRA classifier, not of model '
           f'{model.get("name")!r} ({info.task})', f'use an LRA classification config or set {off}')
  cls = MIXERS[model.mixer]
  traits = getattr(cls, 'traits', None)   # the mixer's declared facts (layers/registry.py)
  options = model.get('mixer_kwargs') or {}
  why = traits.why_padding_amount_matters_for(cls, options) if traits else ''
  _require(not why, f'config.length_buckets is exact only for mixers whose real outputs do not '
           f'depend on the amount of padding; mixer {model.mixer!r} with these options is '
           f'refused: {why}', f'set {off}')
  _require(processes == 1,
           f'config.length_buckets runs in one process, this run has {processes}',
           f'run one process (it uses all its devices) or set {off}')


def _check_sequence_axis(config: ml_collections.ConfigDict, info, sequence: int) -> None:
  """config.mesh.sequence > 1 splits the tokens of [batch, length] token inputs; what that
  cannot split is refused here (a mixer without a sequence-parallel form: when it is built)."""
  if sequence <= 1:
    return
  off = '--config.mesh.sequence=1'
  shape = tuple(info.input_shape)
  _require(len(shape) == 1 and info.vocab_size is not None and info.task != 'seq2seq',
           f'config.mesh.sequence={sequence} splits token sequences [batch, length], but '
           f'{info.name} ({info.task}) has inputs {shape}', f'set {off}, or shard with '
           '--config.mesh.fsdp / data')
  _require(shape[0] % sequence == 0, f'config.mesh.sequence={sequence} does not divide the '
           f'sequence length {shape[0]}', f'set config.data.max_length to a multiple of {sequence}'
           f' or choose a sequence size that divides {shape[0]}')
  context = config.data.get('eval_context')   # the sliding evaluation's windows (text_lm.py)
  _require(config.data.get('eval_protocol') != 'sliding' or context % sequence == 0,
           f'config.mesh.sequence={sequence} does not divide the sliding evaluation\'s windows '
           f'of config.data.eval_context={context} symbols', 'set config.data.eval_context to a '
           f'multiple of {sequence}')
  _require(not config.length_buckets.multiple, 'config.length_buckets cuts batches to other '
           f'lengths, which config.mesh.sequence={sequence} cannot split evenly',
           f'set --config.length_buckets.multiple=0 or {off}')


def check_config(config: ml_collections.ConfigDict, info, *, devices: int, processes: int = 1,
                 metrics: Sequence[str] | None = None, sequence: int = 1) -> None:
  """Raises ConfigError for the first problem of a (completed) run config; nothing is compiled.
  `devices`: how many ways the mesh splits a batch's examples (its data x fsdp devices);
  `processes`: jax.process_count(); `metrics`: the validation metric names of the dataset's task
  (None: not known, best_metric is not checked); `sequence`: the mesh's 'sequence' size."""
  steps = config.num_train_steps     # 0: nothing to train (init_from, then evaluate)
  _require(_is_int(steps) and steps >= 0, f'config.num_train_steps={steps!r} must be an integer '
           '>= 0', 'set --config.num_train_steps to the number of steps to train')
  share = dict(devices=devices, processes=processes)
  check_batch_size(config.batch_size, 'config.batch_size', **share)
  if config.eval_batch_size != 0:   # 0 = config.batch_size
    check_batch_size(config.eval_batch_size, 'config.eval_batch_size', **share)
  for key in ('log_every_steps', 'eval_every_steps', 'checkpoint_every_steps'):
    value = config[key]
    _require(_is_int(value), f'config.{key}={value!r} must be an integer',
             f'set --config.{key} (0 or less = only at the end)')
  _positive_int(config, 'keep_checkpoints')
  _require(_is_int(config.eval_num_batches) and config.eval_num_batches >= 0,
           f'config.eval_num_batches={config.eval_num_batches!r} must be an integer >= 0',
           'set it to 0 (all of validation) or the number of eval batches per validation')
  _require(not config.get('init_from_refuse_unlearned') or config.init_from,
           'a fine-tuning stage (config.init_from_refuse_unlearned) needs the pre-training run it '
           'starts from', 'set --config.init_from=<its workdir>')
  _require(isinstance(config.test_drop_last, bool),
           f'config.test_drop_last={config.test_drop_last!r} must be True or False',
           'set --config.test_drop_last=True or False')
  _require(metrics is None or config.best_metric in metrics,
           f'config.best_metric={config.best_metric!r} is not a validation metric of this '
           f'{info.task} task', f'choose one of {sorted(metrics or ())}')
  _require(config.best_mode in ('max', 'min'), f"config.best_mode={config.best_mode!r} must be "
           "'max' or 'min'", "set --config.best_mode=max (accuracy) or min (loss)")
  _require(config.param_init in PARAM_INIT_SCHEMES,
           f'config.param_init={config.param_init!r} is unknown',
           f'choose one of {list(PARAM_INIT_SCHEMES)}')
  ls = config.label_smoothing
  _require(isinstance(ls, numbers.Real) and 0 <= float(ls) < 1,
           f'config.label_smoothing={ls!r} must be in [0, 1)', 'e.g. 0.1, or 0 for none')
  mixup = config.mixup
  if mixup.mixup_alpha > 0 or mixup.cutmix_alpha > 0:
    _require(info.task == 'classification' and len(info.input_shape) == 3,
             f'config.mixup is for image classification but {info.name} is {info.task} of '
             f'inputs {tuple(info.input_shape)}', 'set config.mixup.mixup_alpha and cutmix_alpha '
             'to 0')
  if info.task == 'seq2seq':
    _positive_int(config.decode, 'beam_size', 'decode.')
    _positive_int(config.decode, 'batch_tokens', 'decode.')
    _require(config.decode.tokenized_bleu in ('moses', '13a'),
             f'config.decode.tokenized_bleu={config.decode.tokenized_bleu!r} is unknown',
             "choose 'moses' (tensor2tensor's get_ende_bleu.sh) or '13a'")
  _check_model(config.model, info)
  _check_sequence_axis(config, info, sequence)
  _check_length_buckets(config, info, processes)
  _check_optimizer(config.optimizer)
  _check_profile_steps(config.profile_steps)
  _check_writers(config.writers)
