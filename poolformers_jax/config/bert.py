"""What the PoNet transfer configs share (configs/ponet_pretrain.py, glue.py, long_text.py).

PoNet-Base = BERT-Base sizes (12 post-LN layers, width 768, 12 heads, FFN 3072, 512 positions,
uncased WordPiece vocabulary of 30522). The optimizer follows the official code, which trains
with the HuggingFace Trainer defaults: AdamW (0.9, 0.999, eps 1e-8), no weight decay, gradient
clipping at norm 1.0, linear decay to 0 after the warmup.

Argument words every file accepts:
  bert       softmax attention instead of PoNet (BERT-Base, the paper's baseline)
  small      a CPU-sized model (4 layers, width 256) and run
  tiny       a smoke test (2 layers, width 32, a few steps)
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax.config.defaults import SIZE_SLOT, base_config, shrink_run
from poolformers_jax.config.words import parse_words as parse_slots

# model family -> its registered token mixer (BERT: softmax attention)
FAMILY_MIXERS = {'ponet': 'ponet', 'bert': 'softmax'}


def parse_words(arg: str | None, choices: dict[str, tuple[str, ...]], usage: str) -> dict[str, str]:
  """'sso,bert,tiny' -> {'objective': 'sso', 'family': 'bert', 'size': 'tiny'}; the first choice
  of each slot is its default."""
  slots = {'family': ('a model family', tuple(FAMILY_MIXERS)), 'size': SIZE_SLOT,
           **{slot: (f'a {slot}', words) for slot, words in choices.items()}}
  filled = parse_slots(arg, slots, usage)
  return {slot: filled[slot] or words[0] for slot, (_, words) in slots.items()}


def model_config(name: str, family: str, max_length=None) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(dict(
      name=name,                              # ponet_mlm (pre-training) | ponet_classifier
      mixer=FAMILY_MIXERS[family],
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


def transfer_config(data_name: str, model: ml_collections.ConfigDict, size: str, *,
                    lengths: dict[str, int], learning_rate: float, warmup_steps: int,
                    num_train_steps: int, batch_size: int, best_metric: str,
                    best_mode: str = 'max', eval_every_steps: int = 5000
                    ) -> ml_collections.ConfigDict:
  """One PoNet transfer run at `size`; `lengths[size]` (where given) is the data's sequence
  length at that size (the model's position table follows it unless the model sets one)."""
  config = base_config(data_name)
  config.model = model
  config.optimizer.update(learning_rate=learning_rate, schedule='linear',
                          warmup_steps=warmup_steps, grad_clip_norm=1.0)
  config.batch_size = batch_size
  config.num_train_steps = num_train_steps
  config.eval_every_steps = config.checkpoint_every_steps = eval_every_steps
  config.best_metric = best_metric
  config.best_mode = best_mode
  # Fine-tuning: config.init_from = a pre-training run (its workdir) or the official checkpoint
  # folder (chtan/ponet-base-uncased); '' = train from scratch. Only the classifier may be
  # missing from a pre-training checkpoint.
  if model.name == 'ponet_classifier':
    config.init_from_allow_missing = '^classifier/'
  shrink_run(config, size, small_batch_size=16)
  if size == 'small':
    model.update(emb_dim=256, num_layers=4, num_heads=4, mlp_dim=1024)
  elif size == 'tiny':
    model.update(emb_dim=32, num_layers=2, num_heads=2, mlp_dim=64)
    config.optimizer.learning_rate = 1e-3
  if size in lengths:
    config.data.max_length = lengths[size]
  return config
