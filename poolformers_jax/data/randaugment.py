"""RandAugment as timm implements it (`timm/data/auto_augment.py`), on uint8 images with PIL.

DeiT (and HVT, which trains with DeiT's recipe) uses timm's `rand-m9-mstd0.5-inc1`:
- 'inc1': the "increasing" op set, 15 ops whose strength grows with the magnitude;
- 2 ops per image, drawn uniformly with replacement; each applied with probability 0.5;
- 'm9-mstd0.5': each applied op draws its magnitude from N(9, 0.5), clipped to [0, 10];
- geometric ops fill with the dataset mean (timm `img_mean`) and resample bicubically (DeiT passes
  interpolation='bicubic'); signed ops (rotate, shear, translate, enhance) negate their argument
  with probability 1/2.
Level -> argument, for magnitude m in [0, 10] (timm's `*_level_to_arg`):
  Rotate 30 m/10 degrees; ShearX/Y 0.3 m/10; TranslateX/YRel 0.45 m/10 of the width / height;
  PosterizeIncreasing keeps 4 - int(4 m/10) bits; SolarizeIncreasing threshold 256 - int(256 m/10);
  SolarizeAdd adds int(110 m/10) below 128; Color/Contrast/Brightness/SharpnessIncreasing factor
  max(0.1, 1 +- 0.9 m/10); AutoContrast, Equalize, Invert take none.
'inc0' uses timm's original set instead: Posterize int(4 m/10) bits, Solarize int(256 m/10),
enhance factors 0.1 + 1.8 m/10 (unsigned).
Our draws come from the example's numpy Generator (deterministic per seed), not Python's random.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from poolformers_jax import extras

extras.require('train', __name__)   # PIL

from PIL import Image, ImageEnhance, ImageOps  # noqa: E402

LEVEL_DENOM = 10.0

# name -> (level(m) -> argument, argument negated with probability 1/2?)
_LEVELS: dict[str, tuple[Callable[[float], float] | None, bool]] = {
    'AutoContrast': (None, False),
    'Equalize': (None, False),
    'Invert': (None, False),
    'Rotate': (lambda m: m / LEVEL_DENOM * 30.0, True),
    'Posterize': (lambda m: int(m / LEVEL_DENOM * 4), False),
    'PosterizeIncreasing': (lambda m: 4 - int(m / LEVEL_DENOM * 4), False),
    'Solarize': (lambda m: int(m / LEVEL_DENOM * 256), False),
    'SolarizeIncreasing': (lambda m: 256 - int(m / LEVEL_DENOM * 256), False),
    'SolarizeAdd': (lambda m: int(m / LEVEL_DENOM * 110), False),
    'ShearX': (lambda m: m / LEVEL_DENOM * 0.3, True),
    'ShearY': (lambda m: m / LEVEL_DENOM * 0.3, True),
    'TranslateXRel': (lambda m: m / LEVEL_DENOM * 0.45, True),
    'TranslateYRel': (lambda m: m / LEVEL_DENOM * 0.45, True),
}
for _name in ('Color', 'Contrast', 'Brightness', 'Sharpness'):
  _LEVELS[_name] = (lambda m: m / LEVEL_DENOM * 1.8 + 0.1, False)
  _LEVELS[_name + 'Increasing'] = (lambda m: m / LEVEL_DENOM * 0.9, True)   # 1 +- this, >= 0.1

RAND_TRANSFORMS = ('AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'Solarize',
                   'SolarizeAdd', 'Color', 'Contrast', 'Brightness', 'Sharpness', 'ShearX',
                   'ShearY', 'TranslateXRel', 'TranslateYRel')
RAND_INCREASING_TRANSFORMS = tuple(
    n + 'Increasing' if n in ('Posterize', 'Solarize', 'Color', 'Contrast', 'Brightness',
                              'Sharpness') else n for n in RAND_TRANSFORMS)


def level(name: str, magnitude: float, sign: float = 1.0):
  """The op's argument at `magnitude` (sign applied to the signed ops); None for no argument."""
  fn, signed = _LEVELS[name]
  if fn is None:
    return None
  arg = fn(magnitude) * sign if signed else fn(magnitude)   # ints stay ints (bits, thresholds)
  if name.endswith('Increasing') and name[:-len('Increasing')] in _ENHANCERS:
    arg = max(0.1, 1.0 + arg)
  return arg


def _affine(img: Image.Image, matrix, fill) -> Image.Image:
  return img.transform(img.size, Image.Transform.AFFINE, matrix, resample=Image.Resampling.BICUBIC,
                       fillcolor=fill)


def _posterize(img: Image.Image, bits: int) -> Image.Image:
  """Keep the top `bits` bits; bits = 0 (PIL >= 10 refuses it) gives black, as DeiT's PIL did."""
  if bits >= 8:
    return img
  mask = ~(2 ** (8 - bits) - 1) & 0xFF
  return img.point([i & mask for i in range(256)] * len(img.getbands()))


def _solarize_add(img: Image.Image, add: int, threshold: int = 128) -> Image.Image:
  lut = [min(255, i + add) if i < threshold else i for i in range(256)]
  return img.point(lut * len(img.getbands()))


_ENHANCERS = {'Color': ImageEnhance.Color, 'Contrast': ImageEnhance.Contrast,
              'Brightness': ImageEnhance.Brightness, 'Sharpness': ImageEnhance.Sharpness}

# name -> fn(PIL image, argument, fill) -> PIL image
_OPS: dict[str, Callable] = {
    'AutoContrast': lambda img, _, fill: ImageOps.autocontrast(img),
    'Equalize': lambda img, _, fill: ImageOps.equalize(img),
    'Invert': lambda img, _, fill: ImageOps.invert(img),
    'Rotate': lambda img, deg, fill: img.rotate(deg, resample=Image.Resampling.BICUBIC,
                                                fillcolor=fill),
    'Posterize': lambda img, bits, fill: _posterize(img, bits),
    'Solarize': lambda img, threshold, fill: ImageOps.solarize(img, threshold),
    'SolarizeAdd': lambda img, add, fill: _solarize_add(img, add),
    'ShearX': lambda img, s, fill: _affine(img, (1, s, 0, 0, 1, 0), fill),
    'ShearY': lambda img, s, fill: _affine(img, (1, 0, 0, s, 1, 0), fill),
    'TranslateXRel': lambda img, p, fill: _affine(img, (1, 0, p * img.size[0], 0, 1, 0), fill),
    'TranslateYRel': lambda img, p, fill: _affine(img, (1, 0, 0, 0, 1, p * img.size[1]), fill),
}
for _name, _enhancer in _ENHANCERS.items():
  _OPS[_name] = (lambda e: lambda img, factor, fill: e(img).enhance(factor))(_enhancer)
for _name in ('Posterize', 'Solarize', *_ENHANCERS):
  _OPS[_name + 'Increasing'] = _OPS[_name]


def apply_op(name: str, image: np.ndarray, arg, fill=(128, 128, 128)) -> np.ndarray:
  """One op on a uint8 [H, W, 3] image with its argument given (see `level`)."""
  return np.asarray(_OPS[name](Image.fromarray(image), arg, tuple(fill)), np.uint8)


@dataclasses.dataclass(frozen=True)
class RandAugment:
  """timm's RandAugment; `parse('rand-m9-mstd0.5-inc1')` builds DeiT's."""
  magnitude: float = 10.0
  num_ops: int = 2
  magnitude_std: float = 0.0
  increasing: bool = False
  prob: float = 0.5

  @property
  def ops(self) -> tuple[str, ...]:
    return RAND_INCREASING_TRANSFORMS if self.increasing else RAND_TRANSFORMS

  def __call__(self, image: np.ndarray, rng: np.random.Generator,
               fill=(128, 128, 128)) -> np.ndarray:
    for index in rng.integers(0, len(self.ops), self.num_ops):   # with replacement, as timm
      if self.prob < 1.0 and rng.random() > self.prob:
        continue
      magnitude = self.magnitude
      if self.magnitude_std == float('inf'):
        magnitude = rng.uniform(0, magnitude)
      elif self.magnitude_std > 0:
        magnitude = rng.normal(magnitude, self.magnitude_std)
      magnitude = min(max(magnitude, 0.0), LEVEL_DENOM)
      name = self.ops[index]
      sign = -1.0 if _LEVELS[name][1] and rng.random() > 0.5 else 1.0   # timm _randomly_negate
      image = apply_op(name, image, level(name, magnitude, sign), fill)
    return image


@functools.lru_cache(maxsize=16)
def parse(policy: str) -> RandAugment:
  """timm's config string: 'rand' then m<int>, n<int>, mstd<float>, inc<0|1> joined by '-'."""
  words = policy.split('-')
  if words[0] != 'rand':
    raise ValueError(f"config.data.rand_augment={policy!r}: expected timm's 'rand-...' form, "
                     "e.g. 'rand-m9-mstd0.5-inc1' (DeiT); '' turns it off.")
  kwargs: dict[str, Any] = {}   # RandAugment's fields: ints, a float and a bool
  for word in words[1:]:
    match = re.fullmatch(r'(mstd|m|n|inc)(\d.*)', word)
    if not match:
      raise ValueError(f'config.data.rand_augment={policy!r}: unknown section {word!r}; '
                       'use m<int>, n<int>, mstd<float>, inc<0|1>.')
    key, value = match.groups()
    if key == 'mstd':
      kwargs['magnitude_std'] = float('inf') if float(value) > 100 else float(value)
    else:
      kwargs[{'m': 'magnitude', 'n': 'num_ops', 'inc': 'increasing'}[key]] = (
          bool(int(value)) if key == 'inc' else int(value))
  return RandAugment(**kwargs)
