"""Program transforms: platform-specific rewrites of the training step's program that keep its
values (tested to the bit) and change only how XLA compiles it, around the model's forward:

    with program_transforms(platform)():
      out = model.apply(...)

On the CPU ('cpu'), two flax method interceptors, each measured faster on XLA:CPU and slower
elsewhere (the evidence: docs/efficiency.md, "Program transforms on the CPU"):
  dense_on_rows      every nn.Dense on [..., K] inputs as one [rows, K] x [K, N] product
  dropout_mask_once  every nn.Dropout mask hashed once and stored as bits
The CPU lowering of the threefry hash, the other CPU-only choice, is process-wide: the programs
opt in to it (`poolformers_jax.runtime`), not the step.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

Interceptor = Callable[..., object]


def dense_on_rows(next_fun, args, kwargs, context):
  """Every `nn.Dense` applied to [..., K] inputs computes one [rows, K] x [K, N] product: the
  kernel's gradient is then a plain x^T g over rows, XLA:CPU's fast dot path (a [B, L, K]
  product's transpose contracts two axes of both operands, behind copies)."""
  inputs = args[0] if args else None
  if (context.method_name != '__call__' or not isinstance(context.module, nn.Dense)
      or inputs is None or getattr(inputs, 'ndim', 0) <= 2):
    return next_fun(*args, **kwargs)
  out = next_fun(inputs.reshape(-1, inputs.shape[-1]), *args[1:], **kwargs)
  return out.reshape(inputs.shape[:-1] + out.shape[-1:])


def stored_once(mask: jax.Array) -> jax.Array:
  """`mask` (bool) packed into bits along its last axis and unpacked again: the same values.
  XLA fuses a mask's threefry hash into every select that applies it (dropout's forward and
  backward); the packing, a reduction, ends a fusion, so the mask is hashed once."""
  packed = jnp.packbits(mask, axis=-1)
  return jnp.unpackbits(packed, axis=-1, count=mask.shape[-1]).astype(bool)


def dropout_mask_once(next_fun, args, kwargs, context):
  """Every `nn.Dropout` draws flax's own mask (the same bits: `jax.random.bernoulli` of the same
  key) and applies it through `stored_once`. Scalars, rates 0 and 1 and deterministic calls go
  to flax as they are."""
  module = context.module
  if context.method_name != '__call__' or not isinstance(module, nn.Dropout):
    return next_fun(*args, **kwargs)
  inputs = args[0] if args else kwargs['inputs']
  positional = dict(zip(('deterministic', 'rng'), args[1:]))
  deterministic = nn.merge_param('deterministic', module.deterministic,
                                 kwargs.get('deterministic', positional.get('deterministic')))
  if deterministic or module.rate in (0.0, 1.0) or getattr(inputs, 'ndim', 0) == 0:
    return next_fun(*args, **kwargs)
  rng = kwargs.get('rng', positional.get('rng'))
  if rng is None:
    rng = module.make_rng(module.rng_collection)
  keep = 1.0 - module.rate
  shape = [1 if axis in module.broadcast_dims else n for axis, n in enumerate(inputs.shape)]
  mask = stored_once(jax.random.bernoulli(rng, p=keep, shape=shape))
  mask = jnp.broadcast_to(mask, inputs.shape)
  return jax.lax.select(mask, inputs / keep, jnp.zeros_like(inputs))


# platform -> the interceptors the forward runs inside (none elsewhere).
INTERCEPTORS: dict[str, tuple[Interceptor, ...]] = {'cpu': (dense_on_rows, dropout_mask_once)}


def program_transforms(platform: str) -> Callable[[], contextlib.AbstractContextManager[None]]:
  """A context-manager factory: the forward of `platform`'s step runs inside it."""
  interceptors = INTERCEPTORS.get(platform, ())

  @contextlib.contextmanager
  def inside():
    with contextlib.ExitStack() as stack:
      for interceptor in interceptors:
        stack.enter_context(nn.intercept_methods(interceptor))
      yield

  return inside
