"""Flax linen layers, one file per paper. See DESIGN.md for the mixer interface."""
from poolformers_jax.layers.attention import LinearAttention, MultiHeadAttention
from poolformers_jax.layers.common import DropPath, LearnedPositionEmbedding, MlpBlock
from poolformers_jax.layers.registry import MIXERS, build_mixer, register_mixer
# Paper layers register themselves below (one import line per paper file).
