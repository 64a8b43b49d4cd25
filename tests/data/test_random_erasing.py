"""Random erasing (timm RandomErasing, 'pixel' mode) in the vision train pipeline."""
import ml_collections
import numpy as np
import tensorflow_datasets as tfds

from poolformers_jax import data
from poolformers_jax.data import vision


def _config(data_dir, **data_fields):
  config = ml_collections.ConfigDict()
  config.seed, config.batch_size = 0, 4
  config.data = data.get_data_config('cifar10')
  config.data.update(data_dir=str(data_dir), **data_fields)
  return config


def _erased_box(erased, original):
  """The pixels that changed, checked to be one full rectangle -> (height, width)."""
  changed = np.any(erased != original, axis=-1)
  rows, cols = np.nonzero(changed)
  assert rows.size, 'nothing was erased'
  height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
  # N(0, 1) noise equals an original pixel with probability 0: the bounding box is all changed.
  assert changed.sum() == height * width
  return height, width


def _check_box_bounds(height, width, size):
  # area 2-33 % and aspect 0.3-3.3 of the sampled box, up to rounding each side to a pixel
  area = height * width
  assert (np.sqrt(0.02 * size * size) - 0.5) ** 2 <= area <= (np.sqrt(size * size / 3) + 0.5) ** 2
  assert 0.3 * (width - 0.5) - 0.5 <= height <= 3.34 * (width + 0.5) + 0.5
  assert height < size and width < size


def test_random_erase_replaces_one_rectangle_within_bounds():
  image = np.full((32, 32, 3), 7.0, np.float32)   # noise never equals 7
  shapes = set()
  for seed in range(40):
    erased = vision.random_erase(image, 1.0, np.random.default_rng(seed))
    height, width = _erased_box(erased, image)
    _check_box_bounds(height, width, 32)
    shapes.add((height, width))
    assert abs(float(erased[erased != 7.0].mean())) < 1.0   # standard normal noise
    np.testing.assert_array_equal(
        erased, vision.random_erase(image, 1.0, np.random.default_rng(seed)))   # deterministic
    np.testing.assert_array_equal(
        vision.random_erase(image, 0.0, np.random.default_rng(seed)), image)
  assert len(shapes) > 10
  assert (image == 7.0).all()   # the input is not modified in place


def test_pipeline_erasing_changes_one_rectangle_of_the_same_augmented_image(tmp_path):
  """Same seed with and without erasing: crops and flips are drawn first from each example's rng,
  so the images differ exactly in the erased rectangle (prob 1) or not at all (prob 0)."""
  def first_batches(**fields):
    iterator = data.make_train_iterator(data.settings(_config(tmp_path, **fields).data),
                                        batch_size=4, seed=5)
    return [next(iterator) for _ in range(2)]

  with tfds.testing.mock_data(num_examples=8):
    plain = first_batches()
    erased = first_batches(random_erasing=1.0)
    zero = first_batches(random_erasing=0.0)
  for p, e, z in zip(plain, erased, zero):
    np.testing.assert_array_equal(p['targets'], e['targets'])
    np.testing.assert_array_equal(p['inputs'], z['inputs'])
    for original, image in zip(p['inputs'], e['inputs']):
      _check_box_bounds(*_erased_box(image, original), 32)
