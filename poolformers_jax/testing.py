"""Property checks every token mixer must pass; used by the test suite and by anyone adding a mixer.

Each function builds its own inputs from a seed, runs the mixer, and asserts with numpy/chex.
A mixer here is an unbound Flax module following `mixer(x, mask=None, *, deterministic=True)`.
"""
from __future__ import annotations

from typing import Any, Optional

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def random_inputs(seed: int, batch: int, length: int, dim: int,
                  num_real: Optional[list[int]] = None, dtype=jnp.float32):
  """x ~ N(0, 1) of shape [B, L, D] and a right-padded mask with `num_real[b]` real tokens."""
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((batch, length, dim)), dtype)
  if num_real is None:
    num_real = [length] * batch
  mask = jnp.asarray(np.arange(length)[None, :] < np.asarray(num_real)[:, None])
  return x, mask


def init_apply(module: nn.Module, x, mask=None, seed: int = 0, **kwargs):
  """Initializes `module` on (x, mask) and returns (params, output)."""
  variables = module.init(jax.random.PRNGKey(seed), x, mask, **kwargs)
  return variables, module.apply(variables, x, mask, **kwargs)


def assert_padding_values_irrelevant(module: nn.Module, x, mask, *, seed: int = 1,
                                     atol: float = 1e-5, variables: Any = None) -> None:
  """Changing the values at padded positions never changes the outputs at real positions."""
  if variables is None:
    variables = module.init(jax.random.PRNGKey(0), x, mask)
  noise = jax.random.normal(jax.random.PRNGKey(seed), x.shape, x.dtype) * 10.0
  x2 = jnp.where(mask[..., None], x, noise)
  y1 = module.apply(variables, x, mask)
  y2 = module.apply(variables, x2, mask)
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y1, np.float32)[m], np.asarray(y2, np.float32)[m],
                             atol=atol, rtol=atol)


def assert_padding_amount_irrelevant(module: nn.Module, x, mask, extra: int = 5, *,
                                     atol: float = 1e-5, variables: Any = None) -> None:
  """Appending `extra` padded positions does not change the outputs at real positions."""
  if variables is None:
    variables = module.init(jax.random.PRNGKey(0), x, mask)
  b, l, d = x.shape
  x_long = jnp.concatenate([x, jnp.ones((b, extra, d), x.dtype) * 3.0], axis=1)
  mask_long = jnp.concatenate([mask, jnp.zeros((b, extra), bool)], axis=1)
  y = module.apply(variables, x, mask)
  y_long = module.apply(variables, x_long, mask_long)[:, :l]
  m = np.asarray(mask)
  np.testing.assert_allclose(np.asarray(y, np.float32)[m], np.asarray(y_long, np.float32)[m],
                             atol=atol, rtol=atol)


def assert_causal(module: nn.Module, x, *, t: Optional[int] = None, atol: float = 1e-5,
                  variables: Any = None) -> None:
  """Changing tokens after position t never changes outputs at positions <= t; and changing
  the token at t does change the output at t (so the check cannot pass vacuously)."""
  if variables is None:
    variables = module.init(jax.random.PRNGKey(0), x, None)
  length = x.shape[1]
  t = length // 2 if t is None else t
  future = jnp.arange(length)[None, :, None] > t
  x2 = jnp.where(future, jax.random.normal(jax.random.PRNGKey(7), x.shape, x.dtype), x)
  y1 = np.asarray(module.apply(variables, x, None), np.float32)
  y2 = np.asarray(module.apply(variables, x2, None), np.float32)
  np.testing.assert_allclose(y1[:, :t + 1], y2[:, :t + 1], atol=atol, rtol=atol)
  assert not np.allclose(y1[:, t + 1:], y2[:, t + 1:], atol=atol), \
      'future outputs did not change when future inputs changed: the check is vacuous'


def assert_jit_matches(module: nn.Module, x, mask, *, atol: float = 1e-5,
                       variables: Any = None) -> None:
  """jax.jit(apply) equals eager apply."""
  if variables is None:
    variables = module.init(jax.random.PRNGKey(0), x, mask)
  with jax.disable_jit():
    eager = module.apply(variables, x, mask)
  jitted = jax.jit(module.apply)(variables, x, mask)
  chex.assert_trees_all_close(jitted, eager, atol=atol, rtol=atol)


def assert_finite_grads(module: nn.Module, x, mask, *, variables: Any = None) -> None:
  """Gradients w.r.t. parameters and inputs are finite, and not all zero."""
  if variables is None:
    variables = module.init(jax.random.PRNGKey(0), x, mask)

  def loss(v, xx):
    return jnp.sum(jnp.square(module.apply(v, xx, mask).astype(jnp.float32)))

  g_params, g_x = jax.grad(loss, argnums=(0, 1))(variables, x)
  chex.assert_tree_all_finite((g_params, g_x))
  total = sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree_util.tree_leaves(g_params))
  assert total > 0.0, 'all parameter gradients are zero'


def compiled_temp_bytes(fn, *args) -> int:
  """Temp bytes of the compiled `fn(*args)` (deterministic; see docs/efficiency.md)."""
  return int(jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes)
