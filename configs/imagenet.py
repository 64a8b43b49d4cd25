r"""ImageNet-1k vision transformers: DeiT, HVT, ViT-B/16 and CP-ViT-B/16.

Run (the argument picks the model; any key can be overridden, e.g. --config.model.image_size=224):
  python train.py --config configs/imagenet.py:hvt_s_1 --workdir runs/imagenet_hvt_s_1
  python -m poolformers_jax.summary --config configs/imagenet.py:hvt_s_4 --batch_size 2

Paper numbers (params, "FLOPs" = MACs at the config's image size, ImageNet top-1 %):
  HVT Table 1 / 4 (224^2, patch 16):
    deit_ti    5.72M  1.25G  72.20      hvt_ti_1   5.74M  0.64G  69.64
    deit_s    22.05M  4.60G  79.80      hvt_s_1   22.09M  2.40G  78.00
    hvt_s_2    -      1.94G  77.36      hvt_s_3    -      1.62G  76.32
    hvt_s_4 (= Scale HVT-Ti-4)  22.12M  1.39G  75.23
  ContextPool Table 6 (384^2, patch 16):
    vit_b16   86M  55.4G  77.9   cp_vit_b16 (12 layers) 88M  57.2G  79.2
    cp_vit_b16_l10 (10 layers)   75M  48.7G  76.8
Our counts (python -m poolformers_jax.summary) are checked against these in
tests/models/test_vit.py.

Recipes. DeiT / HVT (docs/papers/hvt.md): AdamW, lr 5e-4 x batch / 512, cosine, 5 warmup
epochs, weight decay 0.025 (HVT paper; DeiT uses 0.05), label smoothing 0.1, 300 epochs, batch
1024, no gradient clipping, drop-path 0.1 (DeiT-Ti: 0.0 in DeiT; we keep 0.1 for HVT models as the
HVT code does). ContextPool (Sec. 4.1): batch 1024, lr 1e-3, weight decay 0.05, cosine with 20
warmup epochs, gradient clipping 1.0, 300 epochs at 224^2, then 30 epochs of fine-tuning at 384^2.
Our vit_b16 / cp_vit_b16 configs are at 384^2 (the size Table 6 reports); for the paper's first
phase pass --config.model.image_size=224. DeiT's augmentations in deit_recipe: mixup 0.8 /
cutmix 1.0 (config.mixup, mixed in the train step), random erasing 0.25
(config.data.random_erasing), RandAugment m9 and repeated augmentation (3 repeats).
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax.config import parse_words
from poolformers_jax.config.vision import (
  deit_recipe,
  epochs_to_steps,
  hvt_model,
  vision_config,
  vit_model,
)


def deit_recipe_wd05(config) -> None:
  """DeiT's own recipe (weight decay 0.05), for the DeiT baselines."""
  deit_recipe(config, weight_decay=0.05)


def contextpool_recipe(config) -> None:
  opt = config.optimizer
  opt.learning_rate = 1e-3
  opt.weight_decay = 0.05
  opt.schedule = 'cosine'
  opt.warmup_steps = epochs_to_steps(20, config.batch_size)
  opt.grad_clip_norm = 1.0
  config.label_smoothing = 0.1
  config.num_train_steps = epochs_to_steps(300, config.batch_size)


def _swin_b(context_pool: bool) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      name='swin', num_classes=config_dict.placeholder(int), image_size=224, patch_size=4,
      embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32), window_size=7,
      mlp_ratio=4.0, dropout_rate=0.0, attention_dropout_rate=0.0, drop_path_rate=0.5,
      context_pool=context_pool, cp_predictor_dim=8, cp_size_ratio=0.1, dtype='float32'))


# CP-ViT: ContextPool then attention; placement 'mixer_input' or 'block_output'
# (docs/papers/context_pool.md).
CP_VIT = dict(mixer='contextpool', mixer_kwargs={'placement': 'mixer_input'})

# name -> (function returning config.model, recipe). Adding a model is one entry.
IMAGENET_MODELS = {
    'deit_ti': (lambda: vit_model(192, 12, 3, drop_path_rate=0.0), deit_recipe_wd05),
    'deit_s': (lambda: vit_model(384, 12, 6), deit_recipe_wd05),
    'hvt_ti_1': (lambda: hvt_model(192, 3, 1), deit_recipe),
    'hvt_s_1': (lambda: hvt_model(384, 6, 1), deit_recipe),
    'hvt_s_2': (lambda: hvt_model(384, 6, 2), deit_recipe),
    'hvt_s_3': (lambda: hvt_model(384, 6, 3), deit_recipe),
    'hvt_s_4': (lambda: hvt_model(384, 6, 4), deit_recipe),   # = Scale HVT-Ti-4
    'vit_b16': (lambda: vit_model(768, 12, 12, image_size=384), contextpool_recipe),
    'cp_vit_b16': (lambda: vit_model(768, 12, 12, image_size=384, **CP_VIT), contextpool_recipe),
    'cp_vit_b16_l10': (lambda: vit_model(768, 10, 12, image_size=384, **CP_VIT),
                       contextpool_recipe),
    # Swin-B, ContextPool Table 6: 88M, 15.4G, 83.5 (224^2); for 384^2 also set window_size=12.
    'swin_b': (lambda: _swin_b(context_pool=False), contextpool_recipe),
    # CP-Swin-B, Table 6: 89M, 16.8G, 84.3 (224^2); 85.6 at 384^2 (ContextPool in every block).
    'cp_swin_b': (lambda: _swin_b(context_pool=True), contextpool_recipe),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  words = parse_words(arg, {'model': ('a model', sorted(IMAGENET_MODELS))},
                      example='configs/imagenet.py:hvt_s_1')
  model, recipe = IMAGENET_MODELS[words['model'] or 'hvt_s_1']
  config = vision_config('imagenet2012', model())
  recipe(config)
  config.lock()
  return config
