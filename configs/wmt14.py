r"""WMT14 translation with the encoder-decoder Transformer and CP-attention (ContextPool paper,
sec. 4.1, Tables 1, 3, 4 and Fig. 5).

Prepare once (needs network, then no more; TensorFlow in its own environment, docs/data.md):
  make data-env
  .venv-data/bin/python poolformers_jax/data/build_tfds.py wmt14_translate/de-en \
    --data_dir data_cache
The shared SentencePiece vocabulary (32K) is trained on first use and stored beside the data.
Run (CP-Transformer-Base, EN-DE; 250k steps):
  python train.py --config configs/wmt14.py:base,cp --workdir runs/wmt14_cp_base
  python eval.py  --config configs/wmt14.py:base,cp --workdir runs/wmt14_cp_base --split test
  python -m poolformers_jax.summary --config configs/wmt14.py:base    (60.52M parameters)
eval.py decodes newstest2014 (beam 4, alpha 0.6) and prints sacreBLEU (detokenized, with its
signature) and the paper-style tokenized BLEU (compound splitting for EN-DE).

Argument: `<model>[,cp][,enfr][,L<n>][,small|tiny]`
  model  paper_small (2 layers, d 256, FFN 1024, 4 heads), base (6, 512, 2048, 8; the default),
         big (6, 1024, 4096, 16): the Small / Base / Big models of Li et al. (2019b) the paper
         uses. (Small is `paper_small`: `small` is the size word every config file shares.)
  cp     CP-attention: ContextPool before every attention layer of the encoder (mixer
         'contextpool') and, causally, of the decoder (self- and cross-attention).
  enfr   WMT14 EN-FR instead of EN-DE.
  L<n>   n layers in encoder and decoder (Fig. 5: L = 4..10 with the Base width).
  small  a CPU-sized run on the same data (2 layers, d 64, 8K vocabulary, 64 tokens, 2 000 steps).
  tiny   a smoke test (2 layers, d 32, 20 steps).
Paper's BLEU (Table 4; tokenized BLEU, newstest2014), EN-DE / EN-FR:
  paper_small: standard 22.55 / 31.93, CP 23.67 / 33.24
  base:  standard 28.16 / 38.97, CP 28.91 / 39.36   (Table 1: 17.2 vs 17.6 GB, 1.20 vs 1.12 steps/s
         on a V100 for Base vs CP-Base)
  big:   standard 29.26 / 41.00, CP 30.11 / 41.59
Fig. 5 (EN-DE, Base width): CP (L=6) 28.91; CP with L=8 matches standard attention with L=10.
Parameters (summary tool, 32K shared vocabulary): base 60.5M, base,cp 61.4M (61.1M with the
decoder placement 'self_attention').

From the paper: 250k iterations (Small, Base), 600k with a smaller batch (Big); Adam with the
schedule of Vaswani et al. Our choices where it is silent: Adam b1 0.9, b2 0.98, eps 1e-9 and
lr = d^-0.5 * min(step^-0.5, step * 4000^-1.5) (Vaswani et al.'s Eq. 3, 4000 warmup steps),
label smoothing 0.1, residual dropout 0.1 (Big EN-DE 0.3, EN-FR 0.1: Vaswani et al. sec. 5.4 and
Table 3, dropout of every sublayer output and of the embedding sums) and no attention dropout
(their paper has none; `attention_dropout_rate` drops the decoder's attention probabilities,
the encoder mixer's attention output), pre-LN blocks, rows of 256 packed tokens, 128 rows per
batch (Big: 64), no weight decay or clipping.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax.config import SIZE_SLOT, Numbered, base_config, parse_words, shrink_run

# model -> (layers, width, FFN, heads, batch rows, steps, dropout EN-DE)
MODELS = {
    'paper_small': (2, 256, 1024, 4, 128, 250_000, 0.1),
    'base': (6, 512, 2048, 8, 128, 250_000, 0.1),
    'big': (6, 1024, 4096, 16, 64, 600_000, 0.3),
}
# size -> (width, FFN, heads): the model of the CPU sizes (2 layers unless L<n> says otherwise)
SMALLER = {'small': (64, 256, 4), 'tiny': (32, 64, 2)}
WARMUP = 4000
LAYERS = Numbered('L')


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  words = parse_words(arg, {'model': ('a model', tuple(MODELS)), 'cp': ('CP-attention', ('cp',)),
                            'pair': ('a language pair', ('enfr',)), 'layers': ('layers', LAYERS),
                            'size': SIZE_SLOT},
                      example='configs/wmt14.py:base,cp,L8')
  model, size = words['model'] or 'base', words['size'] or 'full'
  cp, pair = words['cp'] is not None, 'fr-en' if words['pair'] else 'de-en'
  num_layers, dim, mlp_dim, heads, batch, steps, dropout = MODELS[model]
  if pair == 'fr-en' and model == 'big':
    dropout = 0.1
  if size in SMALLER:
    num_layers, (dim, mlp_dim, heads), dropout = 2, SMALLER[size], 0.1
  config = base_config('wmt14')
  config.data.pair = pair
  config.data.target_language = pair.split('-')[0]
  config.model = ml_collections.ConfigDict(dict(
      name='transformer_seq2seq',
      num_layers=LAYERS.number(words['layers']) or num_layers, emb_dim=dim, num_heads=heads,
      mlp_dim=mlp_dim,
      mixer='contextpool' if cp else 'softmax',
      # CP-attention keeps the paper's ContextPool defaults (learned w, Gaussian g, conv m(X)).
      # Encoder CP placement: 'mixer_input' (pool each attention's input) or 'block_output'.
      mixer_kwargs=ml_collections.ConfigDict(dict(placement='mixer_input') if cp else {}),
      # The decoder's causal CP (None = standard decoder attention); placement
      # 'every_attention' (before self- and cross-attention), 'self_attention' or 'block_output'.
      decoder_context_pool=ml_collections.ConfigDict(
          dict(placement='every_attention')) if cp else None,
      # Vaswani et al.'s P_drop is residual dropout (sublayer outputs, embeddings + positions);
      # their paper has no attention dropout.
      dropout_rate=dropout, attention_dropout_rate=0.0, drop_path_rate=0.0,
      activation='relu', dtype='float32',          # 'bfloat16': bf16 compute, float32 params
      vocab_size=config_dict.placeholder(int),     # from the SentencePiece model
      eos_id=config_dict.placeholder(int),         # the vocabulary's (data/translation.py)
  ))
  config.optimizer.update(
      learning_rate=dim ** -0.5 * WARMUP ** -0.5,  # the peak of Vaswani's schedule
      b2=0.98, eps=1e-9, schedule='inverse_sqrt', warmup_steps=WARMUP)
  config.label_smoothing = 0.1
  config.batch_size = batch              # packed rows of data.max_length tokens, global
  config.eval_batch_size = 64            # pairs (padded, not packed)
  config.num_train_steps = steps
  config.eval_every_steps = 5_000
  # Vaswani et al. average the last 5 (Base) / 20 (Big) checkpoints, written every 10 minutes
  # (Base: 100k steps in 12 hours, about 1 400 steps): keep as many, average with
  # `python -m poolformers_jax.average --workdir DIR --last N`.
  config.checkpoint_every_steps = 1_000
  config.keep_checkpoints = 20 if model == 'big' else 5
  config.best_metric = 'loss'
  config.best_mode = 'min'
  config.decode.bleu_splits = ('test',)
  shrink_run(config, size, small_batch_size=32)
  if size in SMALLER:
    config.optimizer.learning_rate = 1e-3
    config.data.vocab_size = 8000
    config.data.max_length = 64
    config.decode.max_sentences = 256
  config.lock()
  return config
