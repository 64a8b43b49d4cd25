"""`config.param_init`: how the parameters start, applied where the train state is created.

'default'  every module's own initialisers (flax's Dense: lecun-normal kernel, zero bias; the
           MLP's xavier-uniform; trunc-normal position tables; ...). Nothing is redrawn.
'torch'    PyTorch's module defaults, as the LRA code of Nystromformer / PoNet initialises its
           model (model.py, attention.py, model_wrapper.py at the commits in
           docs/papers/lra.md), redrawn from the freshly built tree by parameter name:
  - `kernel` of a Dense or Conv layer ([..., fan_in axes, out]) and the `bias` beside it:
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = the product of every axis but the last
    (nn.Linear / nn.Conv1d `reset_parameters`: kaiming_uniform_(a=sqrt(5)) is that bound);
  - AdaMRA's per-head matrices `head_query`/`head_key`/`head_value` [H, in, out]: the same with
    fan_in = in, as one bias-free nn.Linear per head;
  - token `embedding` and learned `pos_embedding`: N(0, 0.02^2) (the reference's explicit
    `normal_(std=0.02)` on both; PyTorch's own nn.Embedding default would be N(0, 1));
  - everything else is kept: LayerNorm scale 1 / bias 0 (PyTorch's too) and parameters the
    reference has no module for (`kept` lists them).
The draws are seeded by the run's init key, one key per parameter in the tree's sorted order.
"""
from __future__ import annotations

import math
from typing import Any

import flax
import jax

from poolformers_jax.config.defaults import PARAM_INIT_SCHEMES as SCHEMES

EMBEDDING_STD = 0.02
EMBEDDINGS = ('embedding', 'pos_embedding')
STACKED_KERNELS = ('head_query', 'head_key', 'head_value')   # [stack, in, out]


def torch_rule(path: tuple[str, ...], flat: dict[tuple[str, ...], Any]) -> tuple[str, float]:
  """('uniform', bound) | ('normal', std) | ('keep', 0.0) for the parameter at `path`."""
  name, shape = path[-1], flat[path].shape
  if name == 'kernel':
    return 'uniform', 1.0 / math.sqrt(math.prod(shape[:-1]))
  if name == 'bias' and path[:-1] + ('kernel',) in flat:
    return torch_rule(path[:-1] + ('kernel',), flat)
  if name in STACKED_KERNELS:
    return 'uniform', 1.0 / math.sqrt(shape[-2])
  if name in EMBEDDINGS:
    return 'normal', EMBEDDING_STD
  return 'keep', 0.0


def kept(params: Any) -> list[str]:
  """Names ('a/b/c') of the parameters the 'torch' scheme leaves as the modules made them."""
  flat = flax.traverse_util.flatten_dict(params)
  return ['/'.join(p) for p in sorted(flat) if torch_rule(p, flat)[0] == 'keep']


def initialize(scheme: str, params: Any, rng: jax.Array) -> Any:
  """`params` as `scheme` draws them (module docstring); 'default' returns them untouched."""
  if scheme not in SCHEMES:
    raise ValueError(f'config.param_init={scheme!r}; choose one of {list(SCHEMES)}.')
  if scheme == 'default':
    return params
  flat = flax.traverse_util.flatten_dict(params)
  keys = dict(zip(sorted(flat), jax.random.split(jax.random.fold_in(rng, 1), len(flat))))
  out = {}
  for path, value in flat.items():
    kind, size = torch_rule(path, flat)
    if kind == 'uniform':
      value = jax.random.uniform(keys[path], value.shape, value.dtype, -size, size)
    elif kind == 'normal':
      value = size * jax.random.normal(keys[path], value.shape, value.dtype)
    out[path] = value
  return flax.traverse_util.unflatten_dict(out)
