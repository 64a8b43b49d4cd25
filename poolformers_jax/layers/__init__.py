"""Flax linen layers, one file per paper. See DESIGN.md for the mixer interface.

Importing this package registers every paper's mixer in `MIXERS`:
'softmax', 'linear', 'ponet', 'adamra', 'contextpool', 'sac', 'msac'.
"""
from poolformers_jax.layers.attention import LinearAttention, MultiHeadAttention
from poolformers_jax.layers.common import DropPath, LearnedPositionEmbedding, MlpBlock
from poolformers_jax.layers.registry import MIXERS, build_mixer, register_mixer
# Paper layers register themselves at import (one line per paper file).
from poolformers_jax.layers.adamra import AdaMRA
from poolformers_jax.layers.context_pool import ContextPool, ContextPool2D, ContextPoolAttention
from poolformers_jax.layers.hierarchical_pool import HierarchicalPool
from poolformers_jax.layers.msac import MSAC, SAC, CrossAttentiveInput, SelfAttention2D
from poolformers_jax.layers.ponet import PoNet
