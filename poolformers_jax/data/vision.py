"""Image classification: CIFAR-10, CIFAR-100, ImageNet-2012 through `tfds.data_source`.

Examples are float32 [H, W, C], normalised per channel with config.data.mean / std.
Train: CIFAR pads 4 pixels of zeros and crops 32 x 32 at random; ImageNet takes an
Inception-style random crop (8-100 % of the area, aspect ratio 3/4 to 4/3, 10 attempts, else
the center crop) resized (bicubic) to image_size; both flip left-right with probability 1/2.
Eval: resize the shorter side to image_size / eval_crop_fraction (ImageNet: 224 / 0.875 = 256),
then center crop image_size x image_size (CIFAR: identity).

Random erasing (DeiT; timm `RandomErasing` mode 'pixel'): with probability
config.data.random_erasing, one rectangle of 2-33 % of the normalised train image, aspect ratio
0.3-3.3 (log-uniform, 10 attempts), is replaced by N(0, 1) noise. RandAugment
(config.data.rand_augment, timm's policy string) runs on the uint8 crop after the flip, as in
timm. Repeated augmentation is the pipeline's; mixup / cutmix the trainer's (trainer/mixup.py).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from poolformers_jax.data import base

# name -> (classes, image size)
DATASETS = {'cifar10': (10, 32), 'cifar100': (100, 32), 'imagenet2012': (1000, 224)}


def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
  from PIL import Image
  if image.shape[:2] == (height, width):
    return image
  squeeze = image.shape[-1] == 1
  pil = Image.fromarray(image[..., 0] if squeeze else image)
  out = np.asarray(pil.resize((width, height), Image.Resampling.BICUBIC))
  return out[..., None] if squeeze else out


def center_crop(image: np.ndarray, size: int, crop_fraction: float) -> np.ndarray:
  """Resize the shorter side to size / crop_fraction, then take the central size x size."""
  height, width = image.shape[:2]
  short = round(size / crop_fraction)
  if min(height, width) != short:
    scale = short / min(height, width)
    image = _resize(image, max(short, round(height * scale)), max(short, round(width * scale)))
    height, width = image.shape[:2]
  top, left = (height - size) // 2, (width - size) // 2
  return image[top:top + size, left:left + size]


def pad_crop(image: np.ndarray, size: int, padding: int, rng: np.random.Generator) -> np.ndarray:
  """Zero-pad `padding` pixels on each side, take a random crop of the image's own size, then
  resize to size x size if that differs (HVT trains CIFAR at 224^2)."""
  height, width = image.shape[:2]
  padded = np.pad(image, ((padding, padding), (padding, padding), (0, 0)))
  top = rng.integers(0, padded.shape[0] - height + 1)
  left = rng.integers(0, padded.shape[1] - width + 1)
  crop = padded[top:top + height, left:left + width]
  return crop if (height, width) == (size, size) else _resize(crop, size, size)


def inception_crop(image: np.ndarray, size: int, rng: np.random.Generator,
                   area_range=(0.08, 1.0), ratio_range=(3 / 4, 4 / 3), attempts: int = 10):
  height, width = image.shape[:2]
  for _ in range(attempts):
    area = height * width * rng.uniform(*area_range)
    ratio = math.exp(rng.uniform(math.log(ratio_range[0]), math.log(ratio_range[1])))
    crop_w, crop_h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
    if 0 < crop_w <= width and 0 < crop_h <= height:
      top = rng.integers(0, height - crop_h + 1)
      left = rng.integers(0, width - crop_w + 1)
      return _resize(image[top:top + crop_h, left:left + crop_w], size, size)
  return center_crop(image, size, 1.0)


_TRAIN_CROPS = {
    'pad_crop': lambda image, c, rng: pad_crop(image, c.image_size, c.crop_padding, rng),
    'inception_crop': lambda image, c, rng: inception_crop(image, c.image_size, rng),
}


def random_erase(image: np.ndarray, probability: float, rng: np.random.Generator,
                 area_range=(0.02, 1 / 3), aspect_range=(0.3, 1 / 0.3),
                 attempts: int = 10) -> np.ndarray:
  """timm RandomErasing (mode 'pixel', one box) on a normalised float image [H, W, C]."""
  if rng.random() >= probability:
    return image
  height, width = image.shape[:2]
  for _ in range(attempts):
    area = height * width * rng.uniform(*area_range)
    ratio = math.exp(rng.uniform(math.log(aspect_range[0]), math.log(aspect_range[1])))
    box_h, box_w = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
    if box_w < width and box_h < height:
      top = rng.integers(0, height - box_h + 1)
      left = rng.integers(0, width - box_w + 1)
      image = image.copy()
      image[top:top + box_h, left:left + box_w] = rng.standard_normal(
          (box_h, box_w, image.shape[-1]), dtype=np.float32)
      return image
  return image


def source(settings, split):
  return base.tfds_split_source(settings, split)


def preprocess(record, settings: VisionSettings, rng: np.random.Generator | None = None):
  image = np.asarray(record['image'], np.uint8)
  if rng is None:
    image = center_crop(image, settings.image_size, settings.eval_crop_fraction)
  else:
    if settings.train_crop not in _TRAIN_CROPS:
      raise ValueError(f'config.data.train_crop={settings.train_crop!r}; choose one of '
                       f'{sorted(_TRAIN_CROPS)}.')
    image = _TRAIN_CROPS[settings.train_crop](image, settings, rng)
    if settings.random_flip and rng.random() < 0.5:
      image = image[:, ::-1]
    policy = settings.rand_augment
    if policy:   # fill: the mean colour, as timm's img_mean
      fill = tuple(min(255, round(255 * m)) for m in settings.mean)
      from poolformers_jax.data import randaugment  # PIL: when images are read
      image = randaugment.parse(policy)(np.ascontiguousarray(image), rng, fill)
  mean, std = np.asarray(settings.mean, np.float32), np.asarray(settings.std, np.float32)
  inputs = (image.astype(np.float32) / 255.0 - mean) / std
  erasing = settings.random_erasing
  if rng is not None and erasing > 0:   # after normalisation, as in timm (noise is N(0, 1))
    inputs = random_erase(inputs, erasing, rng)
  return {'inputs': inputs, 'targets': np.int32(record['label'])}


def info(settings: VisionSettings, *, from_files: bool = True):
  """`from_files=False` (DatasetSpec.shapes): the same without split sizes (no files read)."""
  size = settings.image_size
  if settings.rand_augment:
    from poolformers_jax.data import randaugment
    randaugment.parse(settings.rand_augment)   # a bad policy fails here, before compiling
  sizes = ({split: len(source(settings, split)) for split in base.SPLITS} if from_files
           else {})
  return base.DatasetInfo(
      name=settings.name, task='classification',
      num_classes=DATASETS[settings.tfds_name.split('/')[0]][0],
      vocab_size=None, input_shape=(size, size, 3), split_sizes=sizes)


@dataclasses.dataclass(frozen=True)
class VisionSettings(base.DataSettings):
  """CIFAR's defaults; ImageNet's are `defaults_of('imagenet2012')`'s."""
  name: str = 'cifar10'
  tfds_name: str = 'cifar10'
  image_size: int = 32
  train_crop: str = 'pad_crop'    # | 'inception_crop'
  crop_padding: int = 4
  eval_crop_fraction: float = 1.0
  random_flip: bool = True
  random_erasing: float = 0.0     # probability of timm RandomErasing per train image (DeiT: 0.25)
  rand_augment: str = ''          # timm RandAugment policy, '' = off (DeiT: 'rand-m9-mstd0.5-inc1')
  # Per-channel mean / std of the training set (CIFAR's, or ImageNet's).
  mean: tuple = (0.4914, 0.4822, 0.4465)
  std: tuple = (0.2470, 0.2435, 0.2616)
  # Our split name -> TFDS split (slices such as 'train[98%:]' work too). CIFAR has no
  # validation split; ImageNet's labelled held-out set is 'validation'.
  tfds_splits: dict = base.mapping(train='train', validation='test', test='test')


def defaults_of(name: str):
  """The `defaults` of dataset `name` (cifar10, cifar100, imagenet2012)."""

  def defaults() -> VisionSettings:
    settings = VisionSettings(name=name, tfds_name=name, image_size=DATASETS[name][1])
    if name != 'imagenet2012':
      return settings
    return dataclasses.replace(
        settings, train_crop='inception_crop', eval_crop_fraction=0.875,
        mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
        tfds_splits=dict(train='train', validation='validation', test='validation'))
  return defaults


for _name in DATASETS:
  base.register_dataset(_name, base.DatasetSpec(
      info, source, preprocess, defaults_of(_name), record=base.image_record,
      shapes=functools.partial(info, from_files=False)))
