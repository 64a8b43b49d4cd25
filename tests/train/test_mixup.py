"""Mixup / cutmix (timm Mixup, 'batch' mode) in trainer/mixup.py, the recipes that enable them, and
one train run with them on a tiny HVT."""
import json
import math

import cifar
import imagenet
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from poolformers_jax import config as config_lib
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer.mixup import MixParams, apply_mix, mix_batch

B, H, W, C, K = 4, 8, 10, 3, 5


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  images = rng.standard_normal((B, H, W, C)).astype(np.float32)
  targets = np.array([0, 1, 2, 4], np.int32)
  return images, targets


def _smoothed(targets, smoothing):
  onehot = np.eye(K, dtype=np.float32)[targets]
  return onehot * (1 - smoothing) + smoothing / K


def test_mixup_with_given_lambda_matches_numpy():
  images, targets = _batch()
  soft = _smoothed(targets, 0.1)
  box = tuple(jnp.int32(v) for v in (1, 5, 2, 7))
  params = MixParams(jnp.float32(0.3), jnp.asarray(False), box)
  mixed, mixed_targets = apply_mix(jnp.asarray(images), jnp.asarray(soft), params)
  np.testing.assert_allclose(mixed, 0.3 * images + 0.7 * images[::-1], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(mixed_targets, 0.3 * soft + 0.7 * soft[::-1], rtol=1e-6)


def test_cutmix_with_given_box_pastes_the_flipped_batch_and_corrects_lambda():
  images, targets = _batch()
  soft = _smoothed(targets, 0.0)
  # lam 0.3 asks for 70 % but the (clipped) box rows 1-4, cols 2-6 is 4 * 5 / 80 = 25 %.
  box = tuple(jnp.int32(v) for v in (1, 5, 2, 7))
  params = MixParams(jnp.float32(0.3), jnp.asarray(True), box)
  mixed, mixed_targets = apply_mix(jnp.asarray(images), jnp.asarray(soft), params)
  expected = images.copy()
  expected[:, 1:5, 2:7] = images[::-1, 1:5, 2:7]
  np.testing.assert_array_equal(mixed, expected)
  np.testing.assert_allclose(mixed_targets, 0.75 * soft + 0.25 * soft[::-1], rtol=1e-6)


def _lam_from_targets(soft_targets, targets, smoothing):
  """Example 0 (label 0) is mixed with example B-1 (label 4): its weight on class 0 is
  lam * (1 - s + s/K) + (1 - lam) * s/K."""
  return (float(soft_targets[0, targets[0]]) - smoothing / K) / (1 - smoothing)


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_mixup_only_images_and_targets_share_one_lambda(seed):
  images, targets = _batch(seed)
  mixed, soft = mix_batch(jax.random.PRNGKey(seed), images, targets, K, mixup_alpha=0.8,
                          cutmix_alpha=0.0, label_smoothing=0.1)
  np.testing.assert_allclose(np.sum(soft, -1), 1.0, rtol=1e-6)
  lam = _lam_from_targets(soft, targets, 0.1)
  assert 0.0 < lam < 1.0
  np.testing.assert_allclose(mixed, lam * images + (1 - lam) * images[::-1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(soft, lam * _smoothed(targets, 0.1)
                             + (1 - lam) * _smoothed(targets[::-1], 0.1), rtol=1e-5, atol=1e-6)


def test_cutmix_only_pastes_a_rectangle_and_targets_follow_its_area():
  images, targets = _batch()
  nonempty = 0
  for seed in range(6):
    mixed, soft = mix_batch(jax.random.PRNGKey(seed), images, targets, K, mixup_alpha=0.0,
                            cutmix_alpha=1.0, label_smoothing=0.0)
    mixed = np.asarray(mixed)
    from_flipped = np.all(mixed == images[::-1], axis=-1) & ~np.all(mixed == images, axis=-1)
    from_original = np.all(mixed == images, axis=-1)
    assert np.all(from_flipped | from_original)        # every pixel from one of the two
    box = from_flipped[0]
    assert np.all(from_flipped == box[None])            # one box for the whole batch
    rows, cols = np.nonzero(box)
    if rows.size:
      nonempty += 1
      # a full rectangle: its bounding box is all True
      assert box[rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()
    lam = 1.0 - box.sum() / (H * W)
    np.testing.assert_allclose(soft[0, targets[0]], lam, rtol=1e-6)
    np.testing.assert_allclose(soft[0, targets[-1]], 1 - lam, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.sum(soft, -1), 1.0, rtol=1e-6)
  assert nonempty >= 3


def test_both_modes_are_used_and_jit_equals_eager():
  images, targets = _batch()
  kwargs = dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1)
  jitted = jax.jit(lambda rng, x, y: mix_batch(rng, x, y, K, **kwargs))
  modes = set()
  for seed in range(8):
    rng = jax.random.PRNGKey(seed)
    eager = mix_batch(rng, jnp.asarray(images), jnp.asarray(targets), K, **kwargs)
    compiled = jitted(rng, images, targets)
    for a, b in zip(eager, compiled):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    # cutmix keeps pixels exactly; mixup (lam strictly inside (0, 1)) changes nearly all of them
    modes.add(bool(np.mean(np.asarray(eager[0]) == images) > 0.2))
    np.testing.assert_allclose(np.sum(eager[1], -1), 1.0, rtol=1e-6)
  assert modes == {True, False}


def test_no_alpha_leaves_the_batch_unchanged():
  images, targets = _batch()
  mixed, soft = mix_batch(jax.random.PRNGKey(0), images, targets, K, mixup_alpha=0.0,
                          cutmix_alpha=0.0, label_smoothing=0.1)
  np.testing.assert_array_equal(mixed, images)
  np.testing.assert_allclose(soft, _smoothed(targets, 0.1), rtol=1e-6)
  with pytest.raises(ValueError, match='image classification only'):
    mix_batch(jax.random.PRNGKey(0), images[..., 0], targets, K, mixup_alpha=0.8, cutmix_alpha=1.0)


def test_deit_recipe_sets_mixup_and_erasing_and_convnets_do_not():
  for config in (imagenet.get_config('hvt_s_1'), imagenet.get_config('deit_ti'),
                 cifar.get_config('hvt_s_4')):
    assert config.is_locked
    assert (config.mixup.mixup_alpha, config.mixup.cutmix_alpha, config.mixup.switch_prob) == (
        0.8, 1.0, 0.5)
    assert config.data.random_erasing == 0.25 and config.label_smoothing == 0.1
  convnet = cifar.get_config('convnet_max')
  assert (convnet.mixup.mixup_alpha, convnet.mixup.cutmix_alpha) == (0.0, 0.0)   # no mixing
  assert convnet.data.random_erasing == 0.0


def test_tiny_hvt_trains_with_mixup_cutmix_and_random_erasing(tmp_path):
  config = config_lib.override(
      cifar.get_config('hvt_s_1,cifar10'),
      **{'num_train_steps': 2, 'eval_every_steps': 2, 'checkpoint_every_steps': 2,
         'log_every_steps': 1, 'progress_bar': False, 'batch_size': 8, 'eval_batch_size': 8,
         'optimizer.warmup_steps': 1, 'data.data_dir': str(tmp_path / 'data'),
         'data.image_size': 32, 'model.image_size': 32, 'model.patch_size': 8,
         'model.hidden_dim': 16, 'model.num_heads': 2, 'model.depth': 2})
  assert config.mixup.cutmix_alpha == 1.0 and config.data.random_erasing == 0.25
  with tfds.testing.mock_data(num_examples=12):
    result = train_and_evaluate(config, str(tmp_path / 'run'))
  assert result.status == 'finished' and result.step == 2
  assert math.isfinite(result.validation['loss']) and result.test['count'] == 12.0
  with open(tmp_path / 'run' / 'metrics.jsonl') as f:
    train = [r for r in map(json.loads, f) if r['split'] == 'train']
  assert [r['step'] for r in train] == [1, 2] and all(math.isfinite(r['loss']) for r in train)
  params = jax.tree_util.tree_leaves(result.state.params)
  assert all(bool(jnp.all(jnp.isfinite(p))) for p in params)


def test_classification_sums_take_soft_targets_as_given():
  from poolformers_jax.tasks.classification import classification_sums
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((B, K)).astype(np.float32)
  soft = rng.dirichlet(np.ones(K), B).astype(np.float32)
  weights = np.array([1, 1, 1, 0], np.float32)
  sums = classification_sums(jnp.asarray(logits), jnp.asarray(soft), jnp.asarray(weights),
                             label_smoothing=0.1)   # ignored: soft targets come smoothed
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  np.testing.assert_allclose(sums['loss'], np.sum(-(soft * log_probs).sum(-1) * weights), rtol=1e-5)
  correct = (logits.argmax(-1) == soft.argmax(-1)) * weights
  assert float(sums['correct']) == correct.sum() and float(sums['count']) == 3.0
