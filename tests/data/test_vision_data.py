"""CIFAR / ImageNet loaders on tfds mock data: normalisation, crops, flips, eval center crop."""
import numpy as np
import tensorflow_datasets as tfds

from poolformers_jax import data
from poolformers_jax.data import vision


def _unnormalize(x, data_config):
  return (x * np.asarray(data_config.std) + np.asarray(data_config.mean)) * 255.0


def test_cifar_eval_is_normalised_identity_and_train_is_pad_crop_flip(tmp_path, make_data_config):
  config = make_data_config('cifar10', data_dir=str(tmp_path))
  with tfds.testing.mock_data(num_examples=6):
    raw = tfds.data_source('cifar10', split='train', data_dir=str(tmp_path))
    images = [np.asarray(raw[i]['image']) for i in range(6)]
    labels = [int(raw[i]['label']) for i in range(6)]
    info = data.get_dataset_info(data.settings(config.data))
    evals = list(data.make_eval_iterator(data.settings(config.data), 'validation', batch_size=4))
    iterator = data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                        seed=3)
    train = [next(iterator) for _ in range(6)]
  assert info.input_shape == (32, 32, 3) and info.num_classes == 10 and info.vocab_size is None
  mean, std = np.asarray([0.4914, 0.4822, 0.4465]), np.asarray([0.2470, 0.2435, 0.2616])
  first = evals[0]['inputs'][0]
  assert first.dtype == np.float32 and first.shape == (32, 32, 3)
  # validation reads the test split, which the mock fills with the same examples
  np.testing.assert_allclose(first, (images[0] / 255.0 - mean) / std, rtol=1e-5, atol=1e-5)
  # Every train image is one of the 9 x 9 crops of the zero-padded image, maybe flipped.
  candidates = {}
  for image, label in zip(images, labels):
    padded = np.pad(image, ((4, 4), (4, 4), (0, 0)))
    for top in range(9):
      for left in range(9):
        crop = padded[top:top + 32, left:left + 32]
        candidates[crop.tobytes()] = (label, False, top, left)
        candidates[crop[:, ::-1].copy().tobytes()] = (label, True, top, left)
  seen = []
  for batch in train:
    for x, target in zip(batch['inputs'], batch['targets']):
      pixels = np.rint(_unnormalize(x, config.data)).astype(np.uint8)
      label, flipped, top, left = candidates[pixels.tobytes()]
      assert label == target
      seen.append((flipped, top, left))
  assert len({s[0] for s in seen}) == 2 and len({s[1:] for s in seen}) > 5


def test_imagenet_eval_center_crop_and_train_inception_crop(tmp_path, make_data_config):
  config = make_data_config('imagenet2012', data_dir=str(tmp_path), image_size=16)
  with tfds.testing.mock_data(num_examples=4):
    evals = list(data.make_eval_iterator(data.settings(config.data), 'validation', batch_size=4))
    train = next(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                          seed=0))
  assert evals[0]['inputs'].shape == (4, 16, 16, 3) and train['inputs'].shape == (4, 16, 16, 3)
  assert np.isfinite(train['inputs']).all()
  # center_crop on an image whose shorter side already has the target size is a pure slice.
  image = np.arange(18 * 30 * 3, dtype=np.uint8).reshape(18, 30, 3)
  np.testing.assert_array_equal(vision.center_crop(image, 16, 16 / 18), image[1:17, 7:23])
  # Inception crop of a constant image is that constant (the resize keeps it).
  flat = np.full((40, 25, 3), 77, np.uint8)
  crop = vision.inception_crop(flat, 16, np.random.default_rng(0))
  assert crop.shape == (16, 16, 3) and (crop == 77).all()


def test_cifar_resized_to_model_image_size(tmp_path, make_data_config):
  """HVT trains CIFAR at 224^2: train crops and eval images are resized to config.data.image_size,
  and a resized eval image equals PIL's bicubic resize of the raw image."""
  from PIL import Image
  config = make_data_config('cifar10', data_dir=str(tmp_path), image_size=48)
  with tfds.testing.mock_data(num_examples=4):
    raw = np.asarray(tfds.data_source('cifar10', split='test', data_dir=str(tmp_path))[0]['image'])
    train = next(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                          seed=0))
    evals = next(iter(data.make_eval_iterator(data.settings(config.data), 'validation',
                                              batch_size=4)))
  assert train['inputs'].shape == (4, 48, 48, 3) and evals['inputs'].shape == (4, 48, 48, 3)
  expected = np.asarray(Image.fromarray(raw).resize((48, 48), Image.BICUBIC))
  got = np.rint(_unnormalize(evals['inputs'][0], config.data))
  np.testing.assert_allclose(got, expected, atol=1.0)


def test_cifar10_pairs_alternate_same_and_other_class_images_of_the_split(
    tmp_path, make_data_config):
  """cifar10_pairs (data/cifar10_pairs.py): pair i is image i of the split with a partner of its
  own class (i even) or of another (i odd), both read as cifar10 reads them; the pairs are fixed."""
  config = make_data_config('cifar10_pairs', data_dir=str(tmp_path))
  spec = data.DATASETS['cifar10_pairs']
  with tfds.testing.mock_data(num_examples=12):
    raw = tfds.data_source('cifar10', split='test', data_dir=str(tmp_path))
    images = [np.asarray(raw[i]['image']) for i in range(12)]
    labels = [int(raw[i]['label']) for i in range(12)]
    info = data.get_dataset_info(data.settings(config.data))
    pairs = spec.source(data.settings(config.data), 'validation')
    examples = [spec.preprocess(pairs[i], data.settings(config.data), None) for i in range(12)]
    again = spec.preprocess(spec.source(data.settings(config.data), 'validation')[5],
                            data.settings(config.data), None)
  assert info.input_shape == (2, 32, 32, 3) and info.num_classes == 2
  single = vision.preprocess({'image': images[0], 'label': labels[0]}, data.settings(config.data),
                             None)
  np.testing.assert_array_equal(examples[0]['inputs'][0], single['inputs'])
  for i, example in enumerate(examples):
    first, second, same = pairs[i]
    np.testing.assert_array_equal(first['image'], images[i])
    partner = next(k for k in range(12) if np.array_equal(images[k], second['image']))
    assert same == (labels[partner] == labels[i]) == int(example['targets'])
    assert same == (i % 2 == 0 or len(set(labels)) == 1)
  np.testing.assert_array_equal(again['inputs'], examples[5]['inputs'])
