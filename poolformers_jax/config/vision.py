"""Vision: `vision_config` (the base of the image classifiers), `vit_model` / `hvt_model`
(config.model of the ViT family) and `deit_recipe`."""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from poolformers_jax.config.defaults import base_config

IMAGENET_TRAIN_SIZE = 1_281_167


def epochs_to_steps(epochs: float, batch_size: int, train_size: int = IMAGENET_TRAIN_SIZE) -> int:
  return int(epochs * train_size // batch_size)


def vit_model(hidden_dim: int, depth: int, num_heads: int, *, patch_size: int = 16,
              image_size: int = 224, classifier: str = 'token', mixer: str = 'softmax',
              mixer_kwargs: dict | None = None,
              drop_path_rate: float = 0.1) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      name='vit', num_classes=config_dict.placeholder(int),   # from the dataset
      image_size=image_size, patch_size=patch_size,
      hidden_dim=hidden_dim, depth=depth, num_heads=num_heads, mlp_ratio=4.0,
      classifier=classifier, mixer=mixer,
      mixer_kwargs=ml_collections.ConfigDict(mixer_kwargs or {}),
      dropout_rate=0.0, attention_dropout_rate=0.0, drop_path_rate=drop_path_rate,
      dtype='float32', remat='none'))   # remat 'full' | 'dots': recompute blocks (training.md)


def hvt_model(hidden_dim: int, num_heads: int, num_stages: int, *, pool_method: str = 'max',
              pool_2d: bool = False, patch_size: int = 16,
              image_size: int = 224) -> ml_collections.ConfigDict:
  c = vit_model(hidden_dim, 12, num_heads, patch_size=patch_size, image_size=image_size,
                classifier='mean')
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
  # DeiT's augmentations (trainer/mixup.py, data/vision.py, data/randaugment.py, data/pipeline.py).
  config.mixup.update(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5)
  config.data.random_erasing = 0.25
  config.data.rand_augment = 'rand-m9-mstd0.5-inc1'
  config.data.repeated_augmentation = 3


def vision_config(data_name: str, model: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The base of the image classifiers: batch 1024, AdamW, cosine, label smoothing 0.1; one
  image size (overriding --config.model.image_size also resizes the data)."""
  config = base_config(data_name)
  config.model = model
  config.optimizer.update(weight_decay=0.05, schedule='cosine')
  config.label_smoothing = 0.1
  config.batch_size = 1024
  config.num_train_steps = 0             # the recipe sets it
  config.eval_every_steps = config.checkpoint_every_steps = 5000
  config.final_test = False              # ImageNet: the validation split is the reported number
  if 'image_size' in model:
    config.data.image_size = model.get_ref('image_size')
  return config
