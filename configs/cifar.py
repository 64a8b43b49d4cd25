r"""CIFAR-100 (and CIFAR-10) image classification: DeiT and HVT (HVT Tables 2-5, 9).

Run:
  python train.py --config configs/cifar.py:hvt_s_4 --workdir runs/cifar100_hvt_s_4
  python -m poolformers_jax.summary --config configs/cifar.py:hvt_s_4 --batch_size 2

HVT trains CIFAR at the ImageNet resolution: images resized to 224^2, patch 16 (Tables 7 and 8
vary these around "224" and "16", the defaults), batch 128, lr 1.25e-4 (= 5e-4 x 128 / 512),
everything else as on ImageNet (DeiT recipe, 300 epochs, weight decay 0.025).
Paper numbers on CIFAR-100 (MACs "FLOPs" G / params M / top-1 %):
  hvt_s_0 (DeiT-S without class token) 4.57 / 21.70 / 71.99     hvt_s_1 2.40 / 21.74 / 74.27
  hvt_s_2 1.94 / 21.76 / 75.37    hvt_s_3 1.62 / 21.77 / 75.22    hvt_s_4 1.39 / 21.77 / 75.43
  hvt_s_4_avg 1.39 / 21.77 / 70.38    hvt_s_4_conv 1.47 / 23.54 / 69.75           (Table 3)
  deit_ti 1.25 / 5.72* / 64.49    deit_ti_nocls 1.25 / 5.72* / 65.93   (Table 2; *1000 classes)
  hvt_s_2_2d (patch 8, 2D max pooling) 4.62 / 21.80 / 77.58 (Table 9; the paper also changes the
  heads and blocks per stage without saying how, so our MACs for it differ - see test_vit.py).
Note: the image data pipeline must resize CIFAR's 32^2 images to config.data.image_size (224).

Adding a model (e.g. a ConvNet engineer's entry) is one line in CIFAR_MODELS: name -> function
returning config.model; the number of classes comes from the dataset.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax.config import parse_words
from poolformers_jax.config.vision import deit_recipe, hvt_model, vision_config, vit_model

CIFAR_TRAIN_SIZE = 50_000
DATASETS = ('cifar100', 'cifar10', 'cifar10_pairs')   # the number of classes comes from the data


def _hvt_s(num_stages: int, **kwargs):
  return lambda: hvt_model(384, 6, num_stages, **kwargs)


def _deit(hidden_dim: int, num_heads: int, classifier: str = 'token'):
  return lambda: vit_model(hidden_dim, 12, num_heads, classifier=classifier)


def _convnet(pool: str):
  return lambda: ml_collections.ConfigDict(dict(
      name='cp_convnet', num_classes=config_dict.placeholder(int), widths=(48, 96, 192),
      convs_per_stage=2, pool=pool))


def _msac_resnet() -> ml_collections.ConfigDict:
  """ResNet-20 widths, MSAC (1x1 and 3x3 SACs) in stages 1 and 2 (models/msac_models.py)."""
  return ml_collections.ConfigDict(dict(
      name='msac_resnet', num_classes=config_dict.placeholder(int), stage_widths=(16, 32, 64),
      stage_blocks=(3, 3, 3), msac_stages=(1, 2), num_heads=4, heads='full', windows=(1, 3),
      regular_conv=True, relative_bias=True, max_distance=32,
      dtype='float32'))   # heads: MSAC Sec. 2.1, or 'split'


def _cross_attentive_similarity() -> ml_collections.ConfigDict:
  """MSAC Sec. 6.1: the MSAC ResNet on two images side by side (32 x 64: max_distance 64)."""
  model = _msac_resnet()
  model.update(name='cross_attentive_similarity', max_distance=64)
  model.segment, model.segment_dim = 'add', 4   # segment augmentation: 'add' | 'concat' | 'none'
  return model


# name -> function returning config.model. Adding a model is one entry.
CIFAR_MODELS = {
    'deit_ti': _deit(192, 3),
    'deit_ti_nocls': _deit(192, 3, classifier='mean'),
    'deit_s': _deit(384, 6),
    'hvt_s_0': _hvt_s(0),
    'hvt_s_1': _hvt_s(1),
    'hvt_s_2': _hvt_s(2),
    'hvt_s_3': _hvt_s(3),
    'hvt_s_4': _hvt_s(4),
    'hvt_s_4_avg': _hvt_s(4, pool_method='avg'),
    'hvt_s_4_conv': _hvt_s(4, pool_method='conv'),
    'hvt_ti_4': lambda: hvt_model(192, 3, 4),
    'hvt_s_2_2d': _hvt_s(2, pool_2d=True, patch_size=8),
    # ConvNets at CIFAR's own 32^2 (ContextPool Table 3; MSAC ResNet), trained with convnet_recipe.
    'cp_convnet': _convnet('contextpool'),
    'convnet_max': _convnet('max'),
    'convnet_avg': _convnet('avg'),
    'msac_resnet': _msac_resnet,
    # Same / different class of two CIFAR-10 images (data cifar10_pairs); no paper number.
    'cross_attentive_similarity': _cross_attentive_similarity,
}
CONVNETS = ('cp_convnet', 'convnet_max', 'convnet_avg', 'msac_resnet')


def convnet_recipe(config) -> None:
  """Our recipe for the ConvNets (neither paper gives one): AdamW lr 2e-3, weight decay 0.05,
  cosine with 5 warmup epochs, 200 epochs at batch 128, no label smoothing."""
  opt = config.optimizer
  opt.learning_rate, opt.weight_decay, opt.schedule = 2e-3, 0.05, 'cosine'
  steps_per_epoch = CIFAR_TRAIN_SIZE // config.batch_size
  opt.warmup_steps = 5 * steps_per_epoch
  config.label_smoothing = 0.0
  config.num_train_steps = 200 * steps_per_epoch


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg = 'model' or 'model,cifar10|cifar100'. Default dataset: cifar100 (HVT, DeiT), but
  cifar10 for the ConvNets (ContextPool Table 3 is on CIFAR-10) and its image pairs for the
  cross-attentive similarity model."""
  words = parse_words(arg, {'model': ('a model', sorted(CIFAR_MODELS)),
                            'dataset': ('a dataset', DATASETS)},
                      example='configs/cifar.py:hvt_s_4,cifar10')
  name = words['model'] or 'hvt_s_4'
  pairs = name == 'cross_attentive_similarity'
  data_name = words['dataset'] or ('cifar10_pairs' if pairs else
                                   'cifar10' if name in CONVNETS else 'cifar100')
  config = vision_config(data_name, CIFAR_MODELS[name]())
  config.batch_size = 128
  config.eval_batch_size = 500
  config.eval_every_steps = config.checkpoint_every_steps = 2000
  config.final_test = True
  if name in CONVNETS or pairs:
    convnet_recipe(config)
  else:
    deit_recipe(config, train_size=CIFAR_TRAIN_SIZE)
  config.lock()
  return config
