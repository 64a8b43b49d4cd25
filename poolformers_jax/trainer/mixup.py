"""DeiT's batch augmentations mixup and cutmix, as timm's `Mixup` in 'batch' mode, in pure JAX.

One lambda per batch, drawn from Beta(alpha, alpha). With both alphas > 0 the batch is cutmixed
with probability `switch_prob`, else mixed up. Every example is mixed with the batch flipped along
axis 0 (example i with example B - 1 - i), as timm does:
  mixup:  x = lam * x + (1 - lam) * flip(x)
  cutmix: a box of (1 - lam) of the image, centered uniformly (clipped at the borders), is pasted
          from flip(x); lam is then corrected to 1 - box area / image area (timm correct_lam=True).
Targets: one-hot, label-smoothed (timm's off value smoothing / C, as optax.smooth_labels), then
  y = lam * y + (1 - lam) * flip(y)  ->  soft targets [B, C] summing to 1.

Static shapes (the cutmix box a mask from iotas, mixup vs cutmix a `jnp.where`), so it runs inside
the jitted train step. As timm's defaults: every batch is mixed; no per-element or pair modes.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

Array = jax.Array


class MixParams(NamedTuple):
  """What one batch's mixing needs: lam of the images (before cutmix's area correction), whether
  it is cutmix, and the cutmix box [top, bottom) x [left, right) in pixels (int32 scalars)."""
  lam: Array
  use_cutmix: Array
  box: tuple[Array, Array, Array, Array]


def cutmix_box(rng: Array, lam: Array, height: int, width: int):
  """timm `rand_bbox`: a box of int(H sqrt(1 - lam)) x int(W sqrt(1 - lam)) centered at a uniform
  pixel, clipped to the image -> (top, bottom, left, right)."""
  ratio = jnp.sqrt(1.0 - lam)
  cut_h = jnp.floor(height * ratio).astype(jnp.int32)
  cut_w = jnp.floor(width * ratio).astype(jnp.int32)
  center_rng_y, center_rng_x = jax.random.split(rng)
  cy = jax.random.randint(center_rng_y, (), 0, height)
  cx = jax.random.randint(center_rng_x, (), 0, width)
  top, bottom = jnp.clip(cy - cut_h // 2, 0, height), jnp.clip(cy + cut_h // 2, 0, height)
  left, right = jnp.clip(cx - cut_w // 2, 0, width), jnp.clip(cx + cut_w // 2, 0, width)
  return top, bottom, left, right


def sample_mix_params(rng: Array, height: int, width: int, *, mixup_alpha: float,
                      cutmix_alpha: float, switch_prob: float = 0.5) -> MixParams:
  """timm `Mixup._params_per_batch` (mix_prob 1) plus the cutmix box."""
  if mixup_alpha <= 0 and cutmix_alpha <= 0:
    raise ValueError('sample_mix_params: mixup_alpha or cutmix_alpha must be > 0.')
  switch_rng, mixup_rng, cutmix_rng, box_rng = jax.random.split(rng, 4)
  if mixup_alpha > 0 and cutmix_alpha > 0:
    use_cutmix = jax.random.uniform(switch_rng) < switch_prob
  else:
    use_cutmix = jnp.asarray(cutmix_alpha > 0)
  def beta(key, alpha):   # lam ~ Beta(alpha, alpha); alpha 0 = that mode is off
    return jax.random.beta(key, alpha, alpha) if alpha > 0 else jnp.float32(1.0)

  lam = jnp.where(use_cutmix, beta(cutmix_rng, cutmix_alpha), beta(mixup_rng, mixup_alpha))
  lam = lam.astype(jnp.float32)
  return MixParams(lam, use_cutmix, cutmix_box(box_rng, lam, height, width))


def apply_mix(images: Array, soft_targets: Array, params: MixParams) -> tuple[Array, Array]:
  """Mixes images [B, H, W, C] and soft targets [B, C] with the batch flipped along axis 0."""
  height, width = images.shape[1:3]
  top, bottom, left, right = params.box
  rows = jax.lax.broadcasted_iota(jnp.int32, (height, width), 0)
  cols = jax.lax.broadcasted_iota(jnp.int32, (height, width), 1)
  in_box = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)
  # Cutmix lambda = the share of the image left unboxed (timm correct_lam=True).
  lam_box = 1.0 - jnp.sum(in_box, dtype=jnp.float32) / (height * width)
  lam = jnp.where(params.use_cutmix, lam_box, params.lam)

  flipped = images[::-1]
  mixed_up = lam.astype(images.dtype) * images + (1.0 - lam).astype(images.dtype) * flipped
  cut = jnp.where(in_box[None, :, :, None], flipped, images)
  mixed = jnp.where(params.use_cutmix, cut, mixed_up)
  targets = lam * soft_targets + (1.0 - lam) * soft_targets[::-1]
  return mixed, targets


def mix_batch(rng: Array, images: Array, targets: Array, num_classes: int, *,
              mixup_alpha: float, cutmix_alpha: float, switch_prob: float = 0.5,
              label_smoothing: float = 0.0) -> tuple[Array, Array]:
  """images [B, H, W, C], integer targets [B] -> (mixed images, soft targets [B, num_classes]);
  with both alphas 0 the images unchanged."""
  if images.ndim != 4 or targets.shape != images.shape[:1]:
    raise ValueError(f'mix_batch: expected images [batch, height, width, channels] and targets '
                     f'[batch], got {images.shape} and {targets.shape}; mixup / cutmix are for '
                     'image classification only (remove config.mixup otherwise).')
  soft = jax.nn.one_hot(targets, num_classes, dtype=jnp.float32)
  if label_smoothing:
    soft = optax.smooth_labels(soft, label_smoothing)
  if mixup_alpha <= 0 and cutmix_alpha <= 0:
    return images, soft
  params = sample_mix_params(rng, images.shape[1], images.shape[2], mixup_alpha=mixup_alpha,
                             cutmix_alpha=cutmix_alpha, switch_prob=switch_prob)
  return apply_mix(images, soft, params)
