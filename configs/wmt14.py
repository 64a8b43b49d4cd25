r"""WMT14 translation with the encoder-decoder Transformer and CP-attention (ContextPool paper,
sec. 4.1, Tables 1, 3, 4 and Fig. 5).

Prepare once (needs network, then no more):
  tfds build wmt14_translate/de-en --data_dir=data_cache --file_format=array_record   (fr-en alike)
The shared SentencePiece vocabulary (32K) is trained on first use and stored beside the data.
Run (CP-Transformer-Base, EN-DE; 250k steps):
  python train.py --config configs/wmt14.py:base,cp --workdir runs/wmt14_cp_base
  python eval.py  --config configs/wmt14.py:base,cp --workdir runs/wmt14_cp_base --split test
eval.py decodes newstest2014 (beam 4, alpha 0.6) and prints sacreBLEU (detokenized, with its
signature) and the paper-style tokenized BLEU (compound splitting for EN-DE).

Argument: `<size>[,cp][,enfr][,L<n>][,tiny]`
  size   small (2 layers, d 256, FFN 1024, 4 heads), base (6, 512, 2048, 8), big (6, 1024, 4096,
         16): the sizes of Li et al. (2019b) the paper uses.
  cp     CP-attention: ContextPool before every attention layer of the encoder (mixer
         'contextpool') and, causally, of the decoder's self-attention.
  enfr   WMT14 EN-FR instead of EN-DE.
  L<n>   n layers in encoder and decoder (Fig. 5: L = 4..10 with the Base width).
  tiny   a CPU smoke size (2 layers, d 64) on the same data.
Paper's BLEU (Table 4; tokenized BLEU, newstest2014), EN-DE / EN-FR:
  small: standard 22.55 / 31.93, CP 23.67 / 33.24
  base:  standard 28.16 / 38.97, CP 28.91 / 39.36   (Table 1: 17.2 vs 17.6 GB, 1.20 vs 1.12 steps/s
         on a V100 for Base vs CP-Base)
  big:   standard 29.26 / 41.00, CP 30.11 / 41.59
Fig. 5 (EN-DE, Base width): CP (L=6) 28.91; CP with L=8 matches standard attention with L=10.
Parameters (summary tool, 32K shared vocabulary): base 60.5M, base,cp 61.1M.

From the paper: 250k iterations (Small, Base), 600k with a smaller batch (Big); Adam with the
schedule of Vaswani et al. Our choices where it is silent: Adam b1 0.9, b2 0.98, eps 1e-9 and
lr = d^-0.5 * min(step^-0.5, step * 4000^-1.5) (Vaswani et al.'s Eq. 3, 4000 warmup steps),
label smoothing 0.1, dropout 0.1 (Big EN-DE 0.3, EN-FR 0.1), pre-LN blocks, rows of 256 packed
tokens, 128 rows per batch (Big: 64), no weight decay or clipping.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax.data import get_data_config

# size -> (layers, width, FFN, heads, batch rows, steps, dropout EN-DE)
SIZES = {
    'small': (2, 256, 1024, 4, 128, 250_000, 0.1),
    'base': (6, 512, 2048, 8, 128, 250_000, 0.1),
    'big': (6, 1024, 4096, 16, 64, 600_000, 0.3),
    'tiny': (2, 64, 256, 4, 32, 2_000, 0.1),
}
# ContextPool options of CP-attention (paper defaults: learned w, Gaussian g, conv m(X)).
CP_OPTIONS = {}
WARMUP = 4000


def parse_arg(arg: str | None) -> tuple[str, bool, str, int | None]:
  size, cp, pair, layers = 'base', False, 'de-en', None
  for word in filter(None, (arg or '').replace(' ', '').split(',')):
    if word in SIZES:
      size = word
    elif word == 'cp':
      cp = True
    elif word == 'enfr':
      pair = 'fr-en'
    elif word[:1] in ('L', 'l') and word[1:].isdigit():
      layers = int(word[1:])
    else:
      raise ValueError(f'config argument {word!r} is not a size {sorted(SIZES)}, `cp`, `enfr` or '
                       'L<layers>; e.g. configs/wmt14.py:base,cp,L8.')
  return size, cp, pair, layers


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  size, cp, pair, layers = parse_arg(arg)
  num_layers, dim, mlp_dim, heads, batch, steps, dropout = SIZES[size]
  if pair == 'fr-en' and size == 'big':
    dropout = 0.1
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.data = get_data_config('wmt14')
  config.data.pair = pair
  config.data.target_language = pair.split('-')[0]
  config.model = ml_collections.ConfigDict(dict(
      name='transformer_seq2seq',
      num_layers=layers or num_layers, emb_dim=dim, num_heads=heads, mlp_dim=mlp_dim,
      mixer='contextpool' if cp else 'softmax',
      mixer_kwargs=ml_collections.ConfigDict(dict(CP_OPTIONS)),
      # ContextPool options for the decoder's causal CP; None = standard decoder attention.
      decoder_context_pool=ml_collections.ConfigDict(dict(CP_OPTIONS)) if cp else None,
      dropout_rate=dropout, attention_dropout_rate=dropout, drop_path_rate=0.0,
      activation='relu', dtype='float32',          # 'bfloat16': bf16 compute, float32 params
      vocab_size=config_dict.placeholder(int),     # from the SentencePiece model
  ))
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=dim ** -0.5 * WARMUP ** -0.5,  # the peak of Vaswani's schedule
      b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.0,
      schedule='inverse_sqrt', warmup_steps=WARMUP,
      grad_clip_norm=0.0, grad_accum_steps=1,
  ))
  config.label_smoothing = 0.1
  config.batch_size = batch              # packed rows of data.max_length tokens, global
  config.eval_batch_size = 64            # pairs (padded, not packed)
  config.num_train_steps = steps
  config.log_every_steps = 100
  config.eval_every_steps = 5_000
  config.checkpoint_every_steps = 5_000
  config.keep_checkpoints = 2
  config.best_metric = 'loss'
  config.best_mode = 'min'
  config.final_test = True
  config.init_from = ''
  config.init_from_fresh = ''
  config.num_devices = -1
  config.progress_bar = True
  config.decode = ml_collections.ConfigDict(dict(
      beam_size=4, alpha=0.6,            # Vaswani et al.; beam_size 1 = greedy
      max_length=256,                    # decoded tokens at most
      batch_size=64,                     # sentences decoded at once (global)
      bleu_splits=('test',),             # splits whose evaluation also decodes and scores BLEU
      max_sentences=0,                   # 0 = every sentence of the split
  ))
  if size == 'tiny':
    config.data.vocab_size = 8000
    config.data.max_length = 64
    config.eval_every_steps = 500
    config.checkpoint_every_steps = 500
    config.decode.max_length = 64
    config.decode.max_sentences = 256
  config.lock()
  return config
