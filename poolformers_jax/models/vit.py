"""Vision transformers: ViT / DeiT (Dosovitskiy et al. 2021; Touvron et al. 2021), CP-ViT
(ContextPool, Huang et al. 2022) and HVT (Pan et al. 2021), one backbone with a mixer by name.

    X_0 = [x_cls; x_p^1 W; ...; x_p^N W] + E                         HVT Eq. (1)
    X'  = X + MSA(LN(X)),  X_l = X' + MLP(LN(X'))                    HVT Eqs. (2)-(3)
    y   = FC(LN(X_L^0))            class-token head                  HVT Eq. (4)
    X^  = Pool(X_{b_m}) + E_{b_m}  after the first block of stage m  HVT Eq. (5)
    y   = FC(AvgPool(LN(X_L)))     no-class-token head               HVT Eq. (6)

- 'vit' is ViT / DeiT (classifier 'token' or 'mean') with any registered token mixer
  (`mixer: 'softmax'` for ViT / DeiT, `'contextpool'` for CP-ViT: ContextPool then attention).
- 'hvt' is the same backbone with `num_stages` (M) pooling stages and the mean head.
  M = 0 is DeiT without a class token (HVT Table 4).

What the papers leave open is pinned mostly by the official code (docs/papers/hvt.md): M stages
of equal width (`PoolingStages`), each pooling followed by a learned position embedding of the
pooled length; timm's layers (LayerNorm eps 1e-6, exact GELU, qkv bias, trunc-normal 0.02 Linear
kernels; the softmax mixer keeps its own), drop-path rising linearly over the blocks; 'hvt' always
uses the mean head (pooling would blend a class token into patches).
"""
from __future__ import annotations

import math
from typing import Any, Literal

import flax.linen as nn
import jax.numpy as jnp

from poolformers_jax.layers.common import (
  Array,
  Dtype,
  LearnedPositionEmbedding,
  check_choices,
  masked_mean,
)
from poolformers_jax.layers.hierarchical_pool import PoolingStages
from poolformers_jax.models.block import Remat, TransformerBlock, apply_block, model_kwargs
from poolformers_jax.models.registry import register_model, register_model_class

LAYER_NORM_EPS = 1e-6
dense_init = nn.initializers.truncated_normal(0.02)


class VisionTransformer(nn.Module):
  """ViT / DeiT / CP-ViT / HVT on images `[B, H, W, C]` -> logits `[B, num_classes]` (float32)."""
  num_classes: int
  image_size: int = 224
  patch_size: int = 16
  hidden_dim: int = 384
  depth: int = 12
  num_heads: int = 6
  mlp_ratio: float = 4.0
  mixer: str = 'softmax'
  mixer_kwargs: Any = None
  classifier: Literal['token', 'mean'] = 'token'   # ViT / DeiT, or HVT's mean (Eq. 6)
  num_stages: int = 0                # M, HVT pooling stages
  pool_method: Literal['max', 'avg', 'conv'] = 'max'
  pool_kernel_size: int = 3
  pool_stride: int = 2
  pool_2d: bool = False
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  dtype: Dtype | None = None
  remat: Remat = 'none'   # what each block keeps for the backward pass (block.REMAT_POLICIES)

  # ---- static structure (no parameters needed) ----
  def input_shape(self) -> tuple[int, int, int]:
    """One example's shape: an RGB image of the configured size."""
    return (self.image_size, self.image_size, 3)

  def stages(self) -> PoolingStages:
    """HVT's staging: which blocks pool and the token layout of every stage."""
    g = self.image_size // self.patch_size
    return PoolingStages(self.depth, self.num_stages, (g, g), self.pool_2d, self.pool_method,
                         self.pool_kernel_size, self.pool_stride)

  def pool_after_blocks(self) -> tuple[int, ...]:
    """Indices b_m of the blocks followed by pooling."""
    return self.stages().pool_after_blocks()

  def stage_lengths(self) -> list[int]:
    """Sequence length in every stage (class token included), e.g. 196, 97, 48, 23, 11."""
    extra = 1 if self.classifier == 'token' else 0
    return [math.prod(l) + extra for l in self.stages().stage_grids()]

  def _check(self, images: Array) -> None:
    name = type(self).__name__
    if images.ndim != 4 or tuple(images.shape[1:3]) != (self.image_size, self.image_size):
      raise ValueError(
          f'{name}: expected images [batch, {self.image_size}, {self.image_size}, channels], got '
          f'shape {tuple(images.shape)}; resize the images or set config.model.image_size.')
    if self.image_size % self.patch_size:
      raise ValueError(f'{name}: image_size={self.image_size} is not a multiple of '
                       f'patch_size={self.patch_size}; pick sizes that tile the image.')
    check_choices(self)
    if self.num_stages and self.classifier != 'mean':
      raise ValueError(f"{name}: pooling stages need classifier='mean' (HVT drops the class "
                       f'token); got {self.classifier!r}.')
    self.stages().check(name)

  @nn.compact
  def __call__(self, images: Array, *, deterministic: bool = True) -> Array:
    self._check(images)
    dtype = self.dtype or images.dtype
    x = nn.Conv(self.hidden_dim, (self.patch_size,) * 2, strides=(self.patch_size,) * 2,
                padding='VALID', dtype=dtype, name='patch_embed')(images)
    batch = x.shape[0]
    x = x.reshape(batch, -1, self.hidden_dim)
    if self.classifier == 'token':
      cls = self.param('cls_token', nn.initializers.truncated_normal(0.02),
                       (1, 1, self.hidden_dim))
      x = jnp.concatenate([jnp.broadcast_to(cls, (batch, 1, self.hidden_dim)).astype(x.dtype), x],
                          axis=1)
    x = LearnedPositionEmbedding(x.shape[1], name='pos_embed')(x)            # Eq. (1)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    mask = jnp.ones(x.shape[:2], bool)

    stages = self.stages()
    pool_after = stages.pool_after_blocks()
    block_args = dict(mixer=self.mixer, num_heads=self.num_heads,
                      mlp_dim=int(self.hidden_dim * self.mlp_ratio),
                      mixer_kwargs=self.mixer_kwargs,
                      dropout_rate=self.dropout_rate,
                      attention_dropout_rate=self.attention_dropout_rate, activation='gelu_exact',
                      layer_norm_epsilon=LAYER_NORM_EPS, kernel_init=dense_init, dtype=self.dtype)
    # Mixers that use the image layout (ContextPool, Fig. 3) get the patch grid behind the class
    # token; after 1D pooling the tokens are a sequence again.
    token_grid: tuple[int, int] | None = stages.grid
    prefix_tokens = 1 if self.classifier == 'token' else 0
    for i in range(self.depth):                                              # Eqs. (2)-(3)
      rate = self.drop_path_rate * i / max(self.depth - 1, 1)
      block = TransformerBlock(drop_path_rate=rate, token_grid=token_grid,
                               prefix_tokens=prefix_tokens, name=f'block{i}', **block_args)
      x = apply_block(block, x, mask, deterministic, self.remat)
      if i in pool_after:                                                    # Eq. (5)
        stage = pool_after.index(i)
        x, mask = stages.pool_stage(stage, x, mask, dtype=self.dtype)
        token_grid = stages.stage_grid(stage + 1)
        self.sow('intermediates', 'stage_tokens', x)

    x = nn.LayerNorm(epsilon=LAYER_NORM_EPS, dtype=self.dtype, name='norm')(x)
    if self.classifier == 'token':
      features = x[:, 0]                                                     # Eq. (4)
    else:
      features = masked_mean(x, mask, axis=1)                                # Eq. (6)
    logits = nn.Dense(self.num_classes, kernel_init=dense_init, dtype=self.dtype, name='head')(
        features)
    return logits.astype(jnp.float32)


# ---- registry: config.model (a locked ConfigDict) -> module ----

_REQUIRED = ('num_classes', 'hidden_dim', 'depth', 'num_heads')
_HVT_KEYS = ('num_stages', 'pool_method', 'pool_kernel_size', 'pool_stride', 'pool_2d')


@register_model('vit')
def build_vit(cfg) -> VisionTransformer:
  """ViT / DeiT / CP-ViT: `classifier` 'token' (default) or 'mean'; mixer by name."""
  hvt_keys = sorted(set(cfg.keys()) & set(_HVT_KEYS))
  if hvt_keys:
    raise ValueError(f'model {cfg["name"]!r}: unknown config.model key(s) {hvt_keys}; pooling '
                     f"stages are HVT's: use name='hvt'.")
  return VisionTransformer(**model_kwargs(cfg, VisionTransformer, required=_REQUIRED))


# HVT: `num_stages` (M) pooling stages and the mean head (no class token).
register_model_class('hvt', VisionTransformer, required=_REQUIRED + ('num_stages',),
                     classifier='mean')
