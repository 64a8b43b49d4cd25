"""RandAugment (timm 'rand-m9-mstd0.5-inc1') op by op on a known image, against hand-computed
pixels or PIL's own call with the hand-computed argument; determinism per seed; the pipeline."""
import os

import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image, ImageEnhance, ImageOps

from poolformers_jax import data
from poolformers_jax.data import randaugment as ra

FILL = (124, 116, 104)   # timm img_mean for the ImageNet mean


def _image():
  """8 x 8 RGB: a horizontal ramp, a vertical ramp and a checkerboard, values 10..245."""
  y, x = np.mgrid[0:8, 0:8]
  return np.stack([10 + 30 * x, 20 + 25 * y, np.where((x + y) % 2, 200, 60)], -1).astype(np.uint8)


def test_levels_are_timms_formulas_at_magnitude_9():
  # Hand-computed from timm's *_level_to_arg at m = 9 (m / 10 = 0.9).
  expected = {'Rotate': 27.0, 'ShearX': 0.27, 'ShearY': 0.27, 'TranslateXRel': 0.405,
              'TranslateYRel': 0.405, 'PosterizeIncreasing': 1, 'SolarizeIncreasing': 26,
              'SolarizeAdd': 99, 'ColorIncreasing': 1.81, 'ContrastIncreasing': 1.81,
              'BrightnessIncreasing': 1.81, 'SharpnessIncreasing': 1.81, 'Posterize': 3,
              'Solarize': 230, 'Color': 1.72, 'AutoContrast': None, 'Equalize': None,
              'Invert': None}
  for name, value in expected.items():
    assert ra.level(name, 9.0) == pytest.approx(value), name
  assert ra.level('Rotate', 9.0, sign=-1) == pytest.approx(-27.0)
  assert ra.level('ColorIncreasing', 9.0, sign=-1) == pytest.approx(0.19)
  assert ra.level('BrightnessIncreasing', 10.0, sign=-1) == pytest.approx(0.1)   # kept >= 0.1
  assert ra.level('Solarize', 9.0, sign=-1) == 230                       # unsigned ops ignore it
  assert isinstance(ra.level('PosterizeIncreasing', 9.0), int)          # PIL needs int bits
  assert len(ra.RAND_INCREASING_TRANSFORMS) == 15 and 'Invert' in ra.RAND_INCREASING_TRANSFORMS


def test_pixel_ops_match_hand_computed_values():
  img = _image().astype(np.int32)
  np.testing.assert_array_equal(ra.apply_op('Invert', _image(), None), 255 - img)
  np.testing.assert_array_equal(ra.apply_op('PosterizeIncreasing', _image(), 1), img & 0x80)
  np.testing.assert_array_equal(ra.apply_op('Posterize', _image(), 3), img & 0xE0)
  # Magnitude 10 keeps 0 bits: black (PIL >= 10 raises there; the PIL DeiT used gave black).
  assert ra.level('PosterizeIncreasing', 10.0) == 0
  np.testing.assert_array_equal(ra.apply_op('PosterizeIncreasing', _image(), 0), 0 * img)
  np.testing.assert_array_equal(ra.apply_op('SolarizeIncreasing', _image(), 26),
                                np.where(img >= 26, 255 - img, img))
  np.testing.assert_array_equal(ra.apply_op('SolarizeAdd', _image(), 99),
                                np.where(img < 128, np.minimum(img + 99, 255), img))
  # AutoContrast stretches each channel to 0..255 (PIL: int(v * scale + offset),
  # scale = 255 / (hi - lo), offset = -lo * scale).
  lo, hi = img.min((0, 1)), img.max((0, 1))
  scale = 255.0 / (hi - lo)
  np.testing.assert_array_equal(ra.apply_op('AutoContrast', _image(), None),
                                (img * scale - lo * scale).astype(np.int32))


def test_geometric_ops_match_hand_shifts_and_pil():
  img = _image()
  # Translate by 0.25 of 8 pixels = 2: output x reads input x + 2; the right 2 columns are fill.
  out = ra.apply_op('TranslateXRel', img, 0.25, FILL)
  np.testing.assert_array_equal(out[:, :6], img[:, 2:])
  np.testing.assert_array_equal(out[:, 6:], np.broadcast_to(FILL, (8, 2, 3)))
  out = ra.apply_op('TranslateYRel', img, -0.25, FILL)
  np.testing.assert_array_equal(out[2:], img[:6])
  np.testing.assert_array_equal(out[:2], np.broadcast_to(FILL, (2, 8, 3)))
  # 90 degrees counter-clockwise is a pure index permutation.
  np.testing.assert_array_equal(ra.apply_op('Rotate', img, 90.0, FILL), np.rot90(img))
  pil = Image.fromarray(img)
  np.testing.assert_array_equal(ra.apply_op('Rotate', img, -27.0, FILL),
                                pil.rotate(-27.0, resample=Image.BICUBIC, fillcolor=FILL))
  np.testing.assert_array_equal(
      ra.apply_op('ShearX', img, 0.27, FILL),
      pil.transform((8, 8), Image.AFFINE, (1, 0.27, 0, 0, 1, 0), resample=Image.BICUBIC,
                    fillcolor=FILL))
  np.testing.assert_array_equal(
      ra.apply_op('ShearY', img, -0.27, FILL),
      pil.transform((8, 8), Image.AFFINE, (1, 0, 0, -0.27, 1, 0), resample=Image.BICUBIC,
                    fillcolor=FILL))


def test_enhance_and_histogram_ops_are_pils():
  img = _image()
  pil = Image.fromarray(img)
  np.testing.assert_array_equal(ra.apply_op('Equalize', img, None), ImageOps.equalize(pil))
  for name, enhancer in (('ColorIncreasing', ImageEnhance.Color),
                         ('ContrastIncreasing', ImageEnhance.Contrast),
                         ('BrightnessIncreasing', ImageEnhance.Brightness),
                         ('SharpnessIncreasing', ImageEnhance.Sharpness)):
    np.testing.assert_array_equal(ra.apply_op(name, img, 1.81), enhancer(pil).enhance(1.81))
  # Brightness 0.5 halves every pixel (PIL blends with black and truncates).
  np.testing.assert_array_equal(ra.apply_op('BrightnessIncreasing', img, 0.5), img // 2)


def test_policy_string_and_determinism_per_seed():
  deit = ra.parse('rand-m9-mstd0.5-inc1')
  assert deit == ra.RandAugment(magnitude=9, num_ops=2, magnitude_std=0.5, increasing=True)
  assert deit.ops == ra.RAND_INCREASING_TRANSFORMS
  with pytest.raises(ValueError, match="unknown section 'x3'"):
    ra.parse('rand-m9-x3')
  with pytest.raises(ValueError, match="'rand-...' form"):
    ra.parse('augmix-m9')
  img = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
  outs = [deit(img, np.random.default_rng(seed), FILL) for seed in (5, 5, 6, 7, 8, 9)]
  np.testing.assert_array_equal(outs[0], outs[1])
  assert sum(not np.array_equal(outs[0], o) for o in outs[2:]) >= 3
  never = ra.RandAugment(magnitude=9, prob=0.0, increasing=True)
  np.testing.assert_array_equal(never(img, np.random.default_rng(5), FILL), img)


def _cifar_config(tmp_path, **fields):
  config = ml_collections.ConfigDict()
  config.seed, config.batch_size = 0, 6
  config.data = data.get_data_config('cifar10')
  config.data.update(data_dir=str(tmp_path), random_flip=False, crop_padding=0, **fields)
  return config


def test_pipeline_randaugment_and_repeated_augmentation(tmp_path):
  with tfds.testing.mock_data(num_examples=6):
    plain = next(data.make_train_iterator(data.settings(_cifar_config(tmp_path).data),
                                          batch_size=6, seed=1))
    config = _cifar_config(tmp_path, rand_augment='rand-m9-mstd0.5-inc1', repeated_augmentation=3)
    settings = data.settings(config.data)
    first, again = (next(data.make_train_iterator(settings, batch_size=config.batch_size, seed=1))
                    for _ in range(2))
    with pytest.raises(ValueError, match='rand_augment'):
      data.get_dataset_info(data.settings(_cifar_config(tmp_path, rand_augment='rand-q1').data))
  np.testing.assert_array_equal(first['inputs'], again['inputs'])         # same seed, same batch
  # Three copies of each of two images, in a row, each augmented on its own.
  targets = first['targets']
  assert list(targets[:3]) == [targets[0]] * 3 and list(targets[3:]) == [targets[3]] * 3
  copies = first['inputs'][:3]
  assert not (np.array_equal(copies[0], copies[1]) and np.array_equal(copies[1], copies[2]))
  assert not np.array_equal(first['inputs'], plain['inputs'])


def _take(iterator, steps):
  return [next(iterator) for _ in range(steps)]


@pytest.mark.parametrize('process_count', [2, 3])
def test_repeated_augmentation_order_and_sharding(make_listops_config, tmp_path, process_count):
  """Epoch of 60: 20 distinct examples, 3 copies in a row; process p holds its rows of the same
  global batches whatever the process count."""
  config = make_listops_config(tmp_path, num_train=60, batch_size=6)
  config.data.repeated_augmentation = 3
  batches = _take(data.make_train_iterator(data.settings(config.data),
                                           batch_size=config.batch_size, seed=2), 20)
  single = np.concatenate([b['inputs'] for b in batches])
  epoch = single[:60]
  np.testing.assert_array_equal(epoch[0::3], epoch[1::3])
  np.testing.assert_array_equal(epoch[0::3], epoch[2::3])
  assert len({row.tobytes() for row in epoch}) == 20
  assert not np.array_equal(single[60:120:3], epoch[0::3])               # a new permutation
  settings = data.settings(config.data)
  per_process = [_take(data.make_train_iterator(settings, batch_size=config.batch_size, seed=2,
                                                process_index=p,
                                                process_count=process_count), 20)
                 for p in range(process_count)]
  joined = np.concatenate([np.concatenate([batches[s]['inputs'] for batches in per_process])
                           for s in range(20)])
  np.testing.assert_array_equal(joined, single)


def test_every_op_matches_timm_at_magnitude_9_both_signs():
  """Against outputs of timm 1.0.15's own AugmentOp (fixtures/make_timm_randaugment_fixture.py)."""
  fixture = np.load(os.path.join(os.path.dirname(__file__), 'fixtures', 'timm_randaugment_m9.npz'))
  names = [str(n) for n in fixture['names']]
  assert len(names) == 2 * len(set(ra.RAND_TRANSFORMS) | set(ra.RAND_INCREASING_TRANSFORMS))
  for key, expected in zip(names, fixture['outputs']):
    name, sign = key.split('/')
    out = ra.apply_op(name, fixture['image'], ra.level(name, 9.0, -1.0 if sign == 'neg' else 1.0),
                      FILL)
    np.testing.assert_array_equal(out, expected, err_msg=key)
