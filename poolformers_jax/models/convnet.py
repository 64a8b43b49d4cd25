"""A CIFAR ConvNet whose pooling layers are ContextPool (Huang et al., ICML 2022, Table 3).

The paper's ConvNet is described only in its supplementary material (not available to us):
Table 3 gives a 0.66M-parameter baseline at 92.9% on CIFAR-10 and +0.02M for ContextPool.
Our decision: a VGG-style net of `len(widths)` stages, each `convs_per_stage` x (3x3 conv without
bias -> BatchNorm -> ReLU) then a stride-2 pooling layer, a global average pool and a Dense
classifier. With the default widths (48, 96, 192) and 2 convs per stage the max-pool baseline
has 0.65M parameters and ContextPool adds 0.03M, close to Table 3.

Table 3's compute (3.7 GFLOPs baseline, 3.9 with ContextPool) cannot hold at CIFAR's 32 x 32 for
any architecture: a weight is applied once per output position, so MACs <= params x (largest
feature-map area) = 0.66M x 32^2 = 0.68 G, 5.5x short (2.7x if "FLOPs" counts 2 per
multiply-add). This family fits both numbers at 160^2 with widths (80, 136, 136) (0.660M,
3.75 G MACs) or at 192^2 with (40, 144, 152), so they do not pin one architecture; we keep CIFAR's
native 32^2 (0.086 G MACs) and the parameter count (config.data.image_size = 160 and
model.widths = (80, 136, 136) give the 160^2 reading). ContextPool2D pools every output cell
over the whole map, so at 160^2 its cost is far above Table 3's +0.2 G: the paper's must be local.

Config fields of `config.model` (name 'cp_convnet'):
  num_classes       int, e.g. 10 for CIFAR-10
  widths            sequence of stage widths, e.g. (48, 96, 192)
  convs_per_stage   int, conv layers before each pooling layer
  pool              'contextpool' (ContextPool2D) | 'max' | 'avg' (the baselines), stride 2
  pool_kwargs       optional dict of ContextPool2D options (weights, locality, predictor,
                    size_ratio, predictor_dim, window_size); only for pool='contextpool'
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from poolformers_jax.layers.common import Array, check_choice, check_image_input
from poolformers_jax.layers.context_pool import ContextPool2D
from poolformers_jax.models.block import model_kwargs
from poolformers_jax.models.registry import register_model

POOL_STRIDE = 2


def _context_pool(kwargs: Mapping[str, Any], name: str) -> Callable[[Array], Array]:
  return ContextPool2D(stride=POOL_STRIDE, name=name, **kwargs)


def _fixed_pool(pool_fn, kwargs: Mapping[str, Any], name: str) -> Callable[[Array], Array]:
  if kwargs:
    raise ValueError(f'pool_kwargs {sorted(kwargs)} are ContextPool options; '
                     f"drop them or set pool='contextpool'.")
  window = (POOL_STRIDE, POOL_STRIDE)
  return functools.partial(pool_fn, window_shape=window, strides=window)


POOLS: dict[str, Callable[[Mapping[str, Any], str], Callable[[Array], Array]]] = {
    'contextpool': _context_pool,
    'max': functools.partial(_fixed_pool, nn.max_pool),
    'avg': functools.partial(_fixed_pool, nn.avg_pool),
}


class CPConvNet(nn.Module):
  """Stages of conv-BN-ReLU, each ending in a stride-2 pooling layer; GAP; Dense classifier."""
  num_classes: int
  widths: Sequence[int] = (48, 96, 192)
  convs_per_stage: int = 2
  pool: str = 'contextpool'
  pool_kwargs: Mapping[str, Any] | None = None

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool = True) -> Array:
    check_choice('CPConvNet', 'pool', self.pool, sorted(POOLS))
    check_image_input(inputs, 'CPConvNet')
    x = inputs.astype(jnp.float32)
    for stage, width in enumerate(self.widths):
      for i in range(self.convs_per_stage):
        x = nn.Conv(width, (3, 3), use_bias=False, name=f'stage{stage}_conv{i}')(x)
        x = nn.BatchNorm(use_running_average=deterministic, momentum=0.9,
                         name=f'stage{stage}_bn{i}')(x)
        x = nn.relu(x)
      x = POOLS[self.pool](dict(self.pool_kwargs or {}), f'stage{stage}_pool')(x)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes, name='head')(x).astype(jnp.float32)


_REQUIRED = ('num_classes', 'widths', 'convs_per_stage', 'pool')


@register_model('cp_convnet')
def build(cfg) -> CPConvNet:
  """`config.model` -> CPConvNet; needs `_REQUIRED` (and optionally pool_kwargs)."""
  return CPConvNet(**model_kwargs(cfg, CPConvNet, required=_REQUIRED))
