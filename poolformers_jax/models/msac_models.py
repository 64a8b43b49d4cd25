"""Models built on MSAC (Barkan): an MSAC ResNet and the cross-attentive image-similarity model.

The paper proposes (Sec. 6) to put MSAC in place of the regular convolutions of a ResNet, in the
later stages where the grid is already small, and (Sec. 6.1) to feed two images side by side to
such a network so that the patches of one attend the patches of the other. It gives no
architecture or numbers; ours: the CIFAR ResNet of He et al. (2016, Sec. 4.2), ResNet-20 by
default, with both 3×3 convolutions of every block of `msac_stages` (default: the last two) an
MSAC of windows (1, 3), strided where the block strides, BatchNorm (momentum 0.9, eps 1e-5)
after every conv / MSAC (docs/papers/msac.md). An MSAC on a 16×16 grid keeps [B, heads, 256,
256] attention maps per scale. The similarity model: CrossAttentiveInput, then the MSAC ResNet
on the N × 2M image t = [x, z].

Every field of `config.model` is required ('msac_resnet': `msac_resnet_config()` gives them;
'cross_attentive_similarity': `cross_attentive_similarity_config()`).
"""
from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from poolformers_jax.layers.common import Array, Dtype, check_image_input
from poolformers_jax.layers.msac import MSAC, CrossAttentiveInput, HeadForm, SegmentForm, Window
from poolformers_jax.layers.registry import module_fields
from poolformers_jax.models.block import fields_of
from poolformers_jax.models.registry import register_model_class


def batch_norm(deterministic: bool, dtype: Dtype | None, name: str) -> nn.BatchNorm:
  """The BatchNorm after every conv / MSAC (momentum 0.9, eps 1e-5)."""
  return nn.BatchNorm(use_running_average=deterministic, momentum=0.9, epsilon=1e-5, dtype=dtype,
                      name=name)


class BasicBlock(nn.Module):
  """Two 3×3 conv-BN (or MSAC-BN) with a shortcut (He et al. 2016)."""
  width: int
  strides: int
  use_msac: bool
  num_heads: int
  heads: HeadForm
  windows: Sequence[Window]
  regular_conv: bool
  relative_bias: bool
  max_distance: int
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool) -> Array:
    norm = lambda name: batch_norm(deterministic, self.dtype, name)

    def mixer(strides: int, name: str):
      if self.use_msac:   # Sec. 6: MSAC in place of the 3×3 convolution
        return MSAC(num_heads=self.num_heads, heads=self.heads, windows=self.windows,
                    features=self.width, strides=strides, regular_conv=self.regular_conv,
                    relative_bias=self.relative_bias, max_distance=self.max_distance,
                    dtype=self.dtype, name=name)
      return nn.Conv(self.width, (3, 3), strides=strides, padding='SAME', use_bias=False,
                     dtype=self.dtype, name=name)

    y = nn.relu(norm('bn1')(mixer(self.strides, 'conv1')(x)))
    y = norm('bn2')(mixer(1, 'conv2')(y))
    if self.strides != 1 or x.shape[-1] != self.width:
      x = nn.Conv(self.width, (1, 1), strides=self.strides, use_bias=False, dtype=self.dtype,
                  name='shortcut')(x)
      x = norm('shortcut_bn')(x)
    return nn.relu(x + y)


class MSACResNet(nn.Module):
  """CIFAR ResNet, MSAC in place of the 3×3 convs of `msac_stages`: [B, H, W, C] -> logits."""
  num_classes: int
  stage_widths: Sequence[int] = (16, 32, 64)
  stage_blocks: Sequence[int] = (3, 3, 3)
  msac_stages: Sequence[int] = (1, 2)   # 0-based stages whose 3×3 convs are MSACs
  num_heads: int = 4
  heads: HeadForm = 'full'     # MSAC heads: 'full' (Sec. 2.1, the paper) or 'split' (see MSAC)
  windows: Sequence[Window] = (1, 3)    # MSAC windows: int w = w×w, or (n, m)
  regular_conv: bool = True             # fuse a regular n×m conv into every SAC (Sec. 3-4)
  relative_bias: bool = True            # b[|Δrow|, |Δcol|] of Eq. 3
  max_distance: int = 32                # relative bias table size per axis
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool = True) -> Array:
    name = type(self).__name__
    check_image_input(inputs, name)
    if len(self.stage_widths) != len(self.stage_blocks):
      raise ValueError(f'{name}: stage_widths {tuple(self.stage_widths)} and stage_blocks '
                       f'{tuple(self.stage_blocks)} must have the same length.')
    bad = sorted(set(self.msac_stages) - set(range(len(self.stage_widths))))
    if bad:
      raise ValueError(f'{name}: msac_stages {bad} are not stage indices 0..'
                       f'{len(self.stage_widths) - 1}.')
    x = inputs.astype(self.dtype or jnp.float32)
    x = nn.Conv(self.stage_widths[0], (3, 3), padding='SAME', use_bias=False, dtype=self.dtype,
                name='stem')(x)
    x = nn.relu(batch_norm(deterministic, self.dtype, 'stem_bn')(x))
    for stage, (width, blocks) in enumerate(zip(self.stage_widths, self.stage_blocks)):
      for block in range(blocks):
        x = BasicBlock(width=width, strides=2 if stage > 0 and block == 0 else 1,
                       use_msac=stage in self.msac_stages, num_heads=self.num_heads,
                       heads=self.heads,
                       windows=tuple(self.windows), regular_conv=self.regular_conv,
                       relative_bias=self.relative_bias, max_distance=self.max_distance,
                       dtype=self.dtype, name=f'stage{stage}_block{block}')(
                           x, deterministic=deterministic)
    x = jnp.mean(x.astype(jnp.float32), axis=(1, 2))
    return nn.Dense(self.num_classes, name='head')(x).astype(jnp.float32)


class CrossAttentiveSimilarity(MSACResNet):
  """Sec. 6.1: image pairs [B, 2, H, W, C] -> t = [x, z] with segments -> MSAC ResNet
  ('backbone') -> logits (2: same / different)."""
  segment: SegmentForm = 'add'   # CrossAttentiveInput's segment augmentation
  segment_dim: int = 4

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool = True) -> Array:
    if inputs.ndim != 5 or inputs.shape[1] != 2:
      raise ValueError(f'{type(self).__name__}: expected image pairs [batch, 2, height, width, '
                       f'channels], got shape {tuple(inputs.shape)}.')
    t = CrossAttentiveInput(segment=self.segment, segment_dim=self.segment_dim,
                            name='cross_input')(inputs[:, 0], inputs[:, 1])
    return MSACResNet(**fields_of(self, MSACResNet), name='backbone')(
        t, deterministic=deterministic)


# --------------------------------------------------------------------------- registry

def msac_resnet_config(num_classes: int = 10) -> ml_collections.ConfigDict:
  """Default `config.model` for 'msac_resnet' (ResNet-20 widths, MSAC in stages 1 and 2)."""
  return ml_collections.ConfigDict(dict(
      name='msac_resnet', num_classes=num_classes, stage_widths=(16, 32, 64),
      stage_blocks=(3, 3, 3), msac_stages=(1, 2), num_heads=4, heads='full', windows=(1, 3),
      regular_conv=True, relative_bias=True, max_distance=32, dtype='float32'))


def cross_attentive_similarity_config(num_classes: int = 2) -> ml_collections.ConfigDict:
  """Default `config.model` for 'cross_attentive_similarity'; max_distance 64 covers the 2M-wide
  side-by-side image of two 32×32 images."""
  cfg = msac_resnet_config(num_classes)
  cfg.name = 'cross_attentive_similarity'
  cfg.max_distance = 64
  cfg.segment = 'add'
  cfg.segment_dim = 4
  return cfg


# Every field is required: start from msac_resnet_config() / cross_attentive_similarity_config()
# (Sec. 6.1's image pairs: dataset `cifar10_pairs`, `configs/cifar.py:cross_attentive_similarity`).
register_model_class('msac_resnet', MSACResNet, required=tuple(module_fields(MSACResNet)))
register_model_class('cross_attentive_similarity', CrossAttentiveSimilarity,
                     required=tuple(module_fields(CrossAttentiveSimilarity)))
