"""Backbones assembled from layers; each picks its token mixer by name."""
from poolformers_jax.models.registry import MODELS, build_model, register_model

__all__ = ['MODELS', 'build_model', 'register_model']
