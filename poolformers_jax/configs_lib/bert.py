"""What the PoNet transfer configs share (configs/ponet_pretrain.py, glue.py, long_text.py).

PoNet-Base = BERT-Base sizes (12 post-LN layers, width 768, 12 heads, FFN 3072, 512 positions,
uncased WordPiece vocabulary of 30522). The optimizer follows the official code, which trains
with the HuggingFace Trainer defaults: AdamW (0.9, 0.999, eps 1e-8), no weight decay, gradient
clipping at norm 1.0, linear decay to 0 after the warmup.

Argument words every file accepts:
  bert       softmax attention instead of PoNet (BERT-Base, the paper's baseline)
  small      a CPU-sized model (4 layers, width 256) and run
  tiny       a smoke test (2 layers, width 32, 64 tokens, a few steps)
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax import configs_lib

SIZES = ('full', 'small', 'tiny')


def parse_words(arg: str | None, choices: dict[str, tuple[str, ...]], usage: str) -> dict[str, str]:
  """'sso,bert,tiny' -> {'objective': 'sso', 'family': 'bert', 'size': 'tiny'} with the one
  parser (configs_lib.parse_words); the first choice of each slot is its default."""
  slots = {'family': ('a model family', ('ponet', 'bert')), 'size': ('a size', SIZES),
           **{slot: (f'a {slot}', words) for slot, words in choices.items()}}
  filled = configs_lib.parse_words(arg, slots, usage)
  return {slot: filled[slot] or words[0] for slot, (_, words) in slots.items()}


def model_config(name: str, family: str, max_length=None) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(dict(
      name=name,                              # ponet_mlm (pre-training) | ponet_classifier
      mixer='ponet' if family == 'ponet' else 'softmax',
      mixer_kwargs=ml_collections.ConfigDict(),
      emb_dim=768, num_layers=12, num_heads=12, mlp_dim=3072, type_vocab_size=2,
      dropout_rate=0.1, layer_norm_eps=1e-12,
      dtype='float32',                        # 'bfloat16': bf16 compute (the paper used fp16)
      # Filled from the data (vocabulary and its [CLS]/[SEP] ids) when left unset:
      vocab_size=config_dict.placeholder(int),
      cls_id=config_dict.placeholder(int),
      sep_id=config_dict.placeholder(int),
  ))
  c.max_length = max_length if max_length is not None else config_dict.placeholder(int)
  return c


def trainer_config(data: ml_collections.ConfigDict, model: ml_collections.ConfigDict,
                   *, learning_rate: float, warmup_steps: int, num_train_steps: int,
                   batch_size: int, best_metric: str, best_mode: str = 'max'
                   ) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = data
  config.model = model
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=learning_rate, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
      schedule='linear', warmup_steps=warmup_steps, grad_clip_norm=1.0, grad_accum_steps=1))
  config.label_smoothing = 0.0
  config.batch_size = batch_size
  config.eval_batch_size = batch_size
  config.num_train_steps = num_train_steps
  config.log_every_steps = 100
  config.eval_every_steps = 5000
  config.checkpoint_every_steps = 5000
  config.keep_checkpoints = 2
  config.best_metric = best_metric
  config.best_mode = best_mode
  config.final_test = True
  config.num_devices = -1
  config.progress_bar = True
  # Fine-tuning: parameters of a pre-training run (its workdir) or of the official checkpoint
  # folder (chtan/ponet-base-uncased); '' = train from scratch.
  config.init_from = ''
  return config


def shrink(config: ml_collections.ConfigDict, size: str) -> None:
  """CPU sizes: a smaller model, shorter run; sequence lengths are the caller's business."""
  if size == 'small':
    config.model.update(emb_dim=256, num_layers=4, num_heads=4, mlp_dim=1024)
    config.update(batch_size=16, eval_batch_size=16, num_train_steps=2000, eval_every_steps=500,
                  checkpoint_every_steps=500, log_every_steps=50)
    config.optimizer.warmup_steps = 100
  elif size == 'tiny':
    config.model.update(emb_dim=32, num_layers=2, num_heads=2, mlp_dim=64)
    config.update(batch_size=8, eval_batch_size=8, num_train_steps=20, eval_every_steps=10,
                  checkpoint_every_steps=10, log_every_steps=5)
    config.optimizer.update(warmup_steps=2, learning_rate=1e-3)
