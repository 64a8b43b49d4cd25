r"""Character-level language modelling on enwik8 / text8 (ContextPool paper, Table 5; MSAC LM).

Run (the paper's 12-layer CP-Transformer, stage 1 of 3; needs enwik8.zip in config.data.data_dir):
  python train.py --config configs/enwik8.py:cp_transformer_l12 --workdir runs/enwik8_cp12
  then stage 2 and 3 in the same workdir (resumes from the stage-1 checkpoint, longer sequences):
  python train.py --config configs/enwik8.py:cp_transformer_l12,stage2 --workdir runs/enwik8_cp12
  python train.py --config configs/enwik8.py:cp_transformer_l12,stage3 --workdir runs/enwik8_cp12
text8 instead of enwik8: add `,text8` (e.g. `configs/enwik8.py:cp_transformer_l14,text8`); it only
sets config.data = get_data_config('text8') (the same model; the vocabulary comes from the data).
CPU run: `configs/enwik8.py:small` (a 2-layer, 128-wide CP-Transformer, 256 characters, 2 000
steps); `tiny` is a smoke test (2 layers, 32 wide, 64 characters, 20 steps). Both shrink any
model (`configs/enwik8.py:transformer_l12,small`).

Argument: `model[,small|tiny][,text8][,stage1|stage2|stage3]`, model one of
  transformer_l12     12 layers, softmax attention (the baseline: CP-Transformer (12) minus CP)
  cp_transformer_l11  CP-Transformer (11): 36M params in Table 5; BPC text8 dev/test 1.05/1.11,
                      enwik8 dev/test 1.03/1.01
  cp_transformer_l12  CP-Transformer (12): 39M; text8 1.04/1.09, enwik8 1.02/0.99   (default)
  cp_transformer_l14  CP-Transformer (14): 44M; text8 1.02/1.07, enwik8 1.01/0.97
  linear_l12          12 layers, causal linear attention (Katharopoulos et al. 2020; chunked,
                      LinearAttention.chunk_size): the long-context model, trains on the sequence
                      axis (--config.mesh.sequence=N); not in the paper, our experiment.
  msac_lm             12 layers with the MSAC mixer (1x1, 1x2, 1x3 SACs, causal). The MSAC paper
                      reports no language-model number; this is our experiment.
Width 512, 8 heads, FFN 2048 ("the same 12-layer model architecture as Longformer"); see
poolformers_jax/models/lm.py for the position-embedding and output-layer decisions.
Parameters (tests/models/test_lm.py): transformer_l12 37.96M (linear_l12 too: the same four
projections), cp_transformer_l11 35.89M, cp_transformer_l12 39.15M, cp_transformer_l14 45.65M
(paper 44M; no width fits all three Table 5 counts, see the test), msac_lm 601.5M with the
paper's full-width heads (MSAC Sec. 2.1: each of the 8 heads has its own 512-wide query / key /
value filters; 138.7M with `--config.model.mixer_kwargs.heads=split`; counted by abstract init).
ContextPool's predictor m(X) has hidden width 64 (d/8; its default d/16 gives 38.6M at 12 layers).

From the paper (Sec. 4.1): three stages of increasing sequence length 2048 / 4096 / 8192 with
batch sizes 32 / 32 / 16, 530k steps in total, linear warmup, dropout 0.2, weight decay 0.01.
Paper's evaluation: overlapping 32k-character windows with step 512, BPC of the last 512
characters of each (Longformer's protocol); BPC = loss in nats / ln 2. That is
  python eval.py --config configs/enwik8.py:cp_transformer_l12 --workdir runs/enwik8_cp12 \
      --split test --batch_size 8 --config.data.eval_protocol=sliding
(config.data.eval_context 32768 and eval_step 512 by default; exact over the whole split, see
poolformers_jax/data/text_lm.py). Validation during training uses non-overlapping windows.
Not in the paper, our decisions: Adam(W) b1 0.9, b2 0.999, eps 1e-8; peak learning rate 2.5e-4
(Longformer-small's), 10k warmup steps, then constant, halved at each later stage; gradient
clipping at norm 0.25 (Longformer / Transformer-XL); stages end at steps 250k / 430k / 530k.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax.config import SIZE_SLOT, base_config, parse_words, shrink_run

# model -> (num_layers, mixer, mixer options)
# ContextPool's predictor m(X) has hidden width 64 = d/8 here (see the module docstring).
# placement: or 'block_output' (docs/results/contextpool_placement.md)
CP_OPTIONS = {'predictor_dim': 64, 'placement': 'mixer_input'}
MODELS = {
    'transformer_l12': (12, 'softmax', {}),
    'cp_transformer_l11': (11, 'contextpool', CP_OPTIONS),
    'cp_transformer_l12': (12, 'contextpool', CP_OPTIONS),
    'cp_transformer_l14': (14, 'contextpool', CP_OPTIONS),
    'linear_l12': (12, 'linear', {}),
    'msac_lm': (12, 'msac', {'windows': (1, 2, 3), 'heads': 'full'}),   # or 'split'
}
DATASETS = ('enwik8', 'text8')
# stage -> (sequence length, batch size, last step of the stage, learning rate)
STAGES = {
    'stage1': (2048, 32, 250_000, 2.5e-4),
    'stage2': (4096, 32, 430_000, 1.25e-4),
    'stage3': (8192, 16, 530_000, 6.25e-5),
}
# size -> (layers, width, heads, FFN, ContextPool predictor width, characters per sequence)
SMALLER = {'small': (2, 128, 4, 512, 16, 256), 'tiny': (2, 32, 2, 64, 8, 64)}


def parse_arg(arg: str | None) -> tuple[str, str, str, str]:
  """'cp_transformer_l14,text8,stage2' -> (model, size, dataset, stage); unknown words fail."""
  words = parse_words(arg, {'model': ('a model', sorted(MODELS)), 'size': SIZE_SLOT,
                            'dataset': ('a dataset', DATASETS),
                            'stage': ('a stage', sorted(STAGES))},
                      example='configs/enwik8.py:cp_transformer_l12,text8,stage2')
  return (words['model'] or 'cp_transformer_l12', words['size'] or 'full',
          words['dataset'] or 'enwik8', words['stage'] or 'stage1')


def model_config(model: str) -> ml_collections.ConfigDict:
  num_layers, mixer, mixer_kwargs = MODELS[model]
  return ml_collections.ConfigDict(dict(
      name='char_lm',
      mixer=mixer,
      mixer_kwargs=ml_collections.ConfigDict(dict(mixer_kwargs)),
      num_layers=num_layers, emb_dim=512, num_heads=8, mlp_dim=2048,
      dropout_rate=0.2, attention_dropout_rate=0.2, activation='relu',
      positions='sinusoidal', tie_embeddings=True,
      dtype='float32',                      # 'bfloat16': bf16 compute, float32 parameters
      remat='none',                         # 'full' | 'dots': recompute blocks (docs/training.md)
      # Filled from the dataset (data.get_dataset_info) when left unset:
      vocab_size=config_dict.placeholder(int),
      max_length=config_dict.placeholder(int),  # only read by positions='learned'
  ))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  model, size, dataset, stage = parse_arg(arg)
  seq_len, batch_size, last_step, learning_rate = STAGES[stage]
  config = base_config(dataset)
  config.data.max_length = seq_len
  config.model = model_config(model)
  config.optimizer.update(
      learning_rate=learning_rate,
      weight_decay=0.01,         # masked off biases, norms and position embeddings
      schedule='constant',       # after warmup; resumes unchanged across stages
      warmup_steps=10_000, grad_clip_norm=0.25)
  config.batch_size = batch_size         # sequences, global over all processes and devices
  config.eval_batch_size = 16
  config.num_train_steps = last_step     # cumulative: stage k resumes where stage k-1 stopped
  config.eval_every_steps = 10_000
  config.checkpoint_every_steps = 5_000
  config.best_metric = 'loss'            # bits per character = loss / ln 2
  config.best_mode = 'min'
  shrink_run(config, size, small_batch_size=16)
  if size in SMALLER:
    layers, width, heads, ffn, predictor, length = SMALLER[size]
    config.model.update(num_layers=layers, emb_dim=width, num_heads=heads, mlp_dim=ffn,
                        dropout_rate=0.1, attention_dropout_rate=0.1)
    if 'predictor_dim' in config.model.mixer_kwargs:
      config.model.mixer_kwargs.predictor_dim = predictor
    config.data.max_length = length
    config.eval_batch_size = 2 * config.batch_size
    config.optimizer.update(learning_rate=1e-3, schedule='cosine')
  config.lock()
  return config
