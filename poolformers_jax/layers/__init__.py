"""Flax linen layers, one file per paper. See docs/design.md for the mixer interface.

Mixers by name: `MIXERS` ('softmax', 'linear', 'ponet', 'adamra', 'contextpool', 'sac', 'msac'),
filled by `@register_mixer` in the paper files; the classes are re-exported here, and
`sharded_sequences` runs a model of your own sequence-parallel (docs/api.md).
"""
from poolformers_jax.layers.adamra import AdaMRA
from poolformers_jax.layers.attention import LinearAttention, MultiHeadAttention
from poolformers_jax.layers.common import DropPath, LearnedPositionEmbedding, MlpBlock
from poolformers_jax.layers.context_pool import (
                                                 ContextPool,
                                                 ContextPool2D,
                                                 ContextPoolAttention,
                                                 ContextPoolOptions,
                                                 WindowContextPool,
)
from poolformers_jax.layers.hierarchical_pool import HierarchicalPool, PoolingStages
from poolformers_jax.layers.msac import MSAC, SAC, CrossAttentiveInput, SelfAttention2D
from poolformers_jax.layers.ponet import PoNet
from poolformers_jax.layers.registry import MIXERS, MixerTraits, build_mixer, register_mixer
from poolformers_jax.layers.sequence_parallel import sharded_sequences

__all__ = [
    'MIXERS', 'MSAC', 'SAC', 'AdaMRA', 'ContextPool', 'ContextPool2D', 'ContextPoolAttention',
    'ContextPoolOptions', 'CrossAttentiveInput', 'DropPath', 'HierarchicalPool',
    'LearnedPositionEmbedding', 'LinearAttention', 'MixerTraits', 'MlpBlock', 'MultiHeadAttention',
    'PoNet', 'PoolingStages', 'SelfAttention2D', 'WindowContextPool', 'build_mixer',
    'register_mixer', 'sharded_sequences',
]
