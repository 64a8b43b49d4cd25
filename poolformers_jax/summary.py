"""Parameters, MACs, training-step memory and stage lengths of a config, as one JSON object.

    python -m poolformers_jax.summary --config configs/imagenet.py:hvt_s_4 [--batch_size 2]

Fields:
- params: number of trainable parameters (the `params` collection; no batch statistics).
- macs: multiply-accumulates of ONE example's deterministic forward pass, counted the way the
  papers count "FLOPs" (HVT Appendix S2: phi_BLK = 12 n d^2 + 2 n^2 d): every matrix product and
  convolution in the traced jaxpr, including the attention products Q K^T and A V, and nothing
  else (no softmax, normalisation, activation or pooling). Counted exactly from shapes: a
  dot_general costs prod(lhs shape) * prod(rhs free dims); a convolution costs
  prod(output shape) * prod(kernel window) * in_channels / groups.
- xla_flops: XLA's own cost_analysis() flops of the same forward (lowered, not compiled),
  which also counts elementwise work and counts a multiply-add as 2; reported for reference.
- train_step_memory_bytes: bytes of one compiled training step (forward, backward, AdamW update)
  at --batch_size (default config.batch_size) from `memory_analysis()`: arguments + outputs +
  temporaries - aliased (the state is donated). Single device, no sharding.
- stage_lengths: the token sequence length of every stage, from the model's `stage_lengths()`
  when it has one, else the input length (tokens) or H * W (images).
"""
from __future__ import annotations

import json
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from ml_collections import config_flags

from poolformers_jax.models import build_model


# ---------------------------------------------------------------- MAC counting from a jaxpr

def _dot_general_macs(eqn) -> int:
  lhs, rhs = (v.aval.shape for v in eqn.invars)
  (_, rhs_contract), (_, rhs_batch) = eqn.params['dimension_numbers']
  rhs_free = [n for i, n in enumerate(rhs) if i not in rhs_contract and i not in rhs_batch]
  return math.prod(lhs) * math.prod(rhs_free)


def _conv_macs(eqn) -> int:
  rhs = eqn.invars[1].aval.shape
  out = eqn.outvars[0].aval.shape
  dn = eqn.params['dimension_numbers']
  kernel_in = rhs[dn.rhs_spec[1]]       # input features per group
  window = math.prod(rhs[i] for i in dn.rhs_spec[2:])
  return math.prod(out) * window * kernel_in


def _sub_jaxprs(eqn):
  for value in eqn.params.values():
    items = value if isinstance(value, (tuple, list)) else (value,)
    for item in items:
      if isinstance(item, jax.extend.core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, jax.extend.core.Jaxpr):
        yield item


def count_macs(jaxpr) -> int:
  """Matmul + convolution MACs of a (Closed)Jaxpr, recursing into calls; scans count x length,
  conditionals count their most expensive branch."""
  jaxpr = getattr(jaxpr, 'jaxpr', jaxpr)
  total = 0
  for eqn in jaxpr.eqns:
    prim = eqn.primitive.name
    if prim == 'dot_general':
      total += _dot_general_macs(eqn)
    elif prim == 'conv_general_dilated':
      total += _conv_macs(eqn)
    elif prim == 'cond':
      total += max(count_macs(b) for b in eqn.params['branches'])
    else:
      subs = [count_macs(j) for j in _sub_jaxprs(eqn)]
      total += sum(subs) * (eqn.params['length'] if prim == 'scan' else 1)
  return total


# ---------------------------------------------------------------- the summary

def example_input(config, batch_size: int):
  """The input spec: the model's own `input_shape()` (images, float32) when it has one, else
  the dataset's (data.get_dataset_info; tokens int32, images float32), which also fills the
  model keys the config leaves to the dataset."""
  model = build_model(config)
  if hasattr(model, 'input_shape'):
    return jax.ShapeDtypeStruct((batch_size,) + tuple(model.input_shape()), jnp.float32)
  from poolformers_jax import data  # pylint: disable=g-import-not-at-top
  from poolformers_jax.train.config_utils import complete_from_dataset
  info = data.get_dataset_info(config, need_files=False)   # sizes only: no dataset needed
  complete_from_dataset(config, info)   # vocab_size / max_length / num_classes left unset
  shape = (batch_size,) + tuple(info.input_shape)
  dtype = jnp.float32 if info.vocab_size is None else jnp.int32
  return jax.ShapeDtypeStruct(shape, dtype)


def _init_variables(model, inputs):
  zeros = jnp.zeros(inputs.shape, inputs.dtype)
  return model.init({'params': jax.random.PRNGKey(0), 'dropout': jax.random.PRNGKey(1)}, zeros,
                    deterministic=True)


def _forward(model, inputs: jax.ShapeDtypeStruct):
  """(forward function, abstract variables, abstract batch-1 input) of one example."""
  one = jax.ShapeDtypeStruct((1,) + tuple(inputs.shape[1:]), inputs.dtype)
  variables = jax.eval_shape(lambda x: _init_variables(model, x), one)
  forward = lambda v, x: model.apply(v, x, deterministic=True)
  return forward, variables, one


def forward_macs(model, inputs: jax.ShapeDtypeStruct) -> int:
  """Matmul + convolution MACs of one example's deterministic forward (traced, not run)."""
  forward, variables, one = _forward(model, inputs)
  return count_macs(jax.make_jaxpr(forward)(variables, one))


def xla_forward_flops(model, inputs: jax.ShapeDtypeStruct) -> float:
  """XLA's cost_analysis() flops of one example's forward (lowered, not compiled)."""
  forward, variables, one = _forward(model, inputs)
  cost = jax.jit(forward).lower(variables, one).cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get('flops', float('nan')))


def train_step_memory(model, inputs: jax.ShapeDtypeStruct) -> dict[str, int]:
  """memory_analysis() of a compiled step: forward, cross-entropy, backward, AdamW update."""
  variables = jax.eval_shape(lambda x: _init_variables(model, x), inputs)
  params = variables['params']
  extra = {k: v for k, v in variables.items() if k != 'params'}
  optimizer = optax.adamw(1e-3)
  opt_state = jax.eval_shape(optimizer.init, params)

  def loss_fn(p, extra_vars, batch, rng):
    out = model.apply({'params': p, **extra_vars}, batch, deterministic=False,
                      rngs={'dropout': rng}, mutable=list(extra_vars) or False)
    logits, new_extra = out if extra_vars else (out, {})
    # Cross-entropy against class 0: same memory as real targets without needing any.
    losses = [optax.softmax_cross_entropy_with_integer_labels(
        l.astype(jnp.float32), jnp.zeros(l.shape[:-1], jnp.int32)).mean()
              for l in jax.tree_util.tree_leaves(logits)]
    return sum(losses), new_extra

  def step(p, o, extra_vars, batch, rng):
    (loss, new_extra), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, extra_vars, batch, rng)
    updates, o = optimizer.update(grads, o, p)
    return optax.apply_updates(p, updates), o, new_extra, loss

  rng = jax.ShapeDtypeStruct((2,), jnp.uint32)
  compiled = jax.jit(step, donate_argnums=(0, 1, 2)).lower(
      params, opt_state, extra, inputs, rng).compile()
  m = compiled.memory_analysis()
  parts = dict(argument=m.argument_size_in_bytes, output=m.output_size_in_bytes,
               temp=m.temp_size_in_bytes, alias=m.alias_size_in_bytes)
  parts = {k: int(v) for k, v in parts.items()}
  parts['total'] = parts['argument'] + parts['output'] + parts['temp'] - parts['alias']
  return parts


def stage_lengths(model, inputs: jax.ShapeDtypeStruct) -> list[int]:
  if hasattr(model, 'stage_lengths'):
    return [int(n) for n in model.stage_lengths()]
  shape = tuple(inputs.shape[1:])
  if jnp.issubdtype(inputs.dtype, jnp.integer):
    return [int(shape[-1])]                      # tokens: (L,) or (2, L)
  return [int(math.prod(shape[:-1]))]            # images: H * W positions


def summarize(config, batch_size: Optional[int] = None,
              inputs: Optional[jax.ShapeDtypeStruct] = None) -> dict[str, Any]:
  """The summary dict. `inputs` (a ShapeDtypeStruct with a batch axis) overrides the data
  config; `batch_size` defaults to config.batch_size."""
  batch_size = int(batch_size or config.get('batch_size', 1))
  if inputs is None:
    inputs = example_input(config, batch_size)
  else:
    inputs = jax.ShapeDtypeStruct((batch_size,) + tuple(inputs.shape[1:]), inputs.dtype)
  model = build_model(config)
  one = jax.ShapeDtypeStruct((1,) + tuple(inputs.shape[1:]), inputs.dtype)
  variables = jax.eval_shape(lambda x: _init_variables(model, x), one)
  params = int(sum(np.prod(a.shape) for a in jax.tree_util.tree_leaves(variables['params'])))
  macs = forward_macs(model, inputs)
  xla_flops = xla_forward_flops(model, inputs)
  memory = train_step_memory(model, inputs)
  return {
      'model': config.model.name,
      'params': params,
      'macs': int(macs),
      'gmacs': round(macs / 1e9, 3),
      'xla_flops': xla_flops,
      'batch_size': batch_size,
      'input_shape': list(inputs.shape[1:]),
      'train_step_memory_bytes': memory['total'],
      'train_step_memory': memory,
      'stage_lengths': stage_lengths(model, inputs),
      'macs_counting': 'matmul + conv MACs of one example (jaxpr), attention products included',
  }


def main(argv):
  del argv
  config = flags.FLAGS['config'].value
  print(json.dumps(summarize(config, flags.FLAGS.batch_size)))


if __name__ == '__main__':
  # Flags are defined only when run as a program, so importing this module (tests, train.py)
  # never collides with another `--config` flag.
  config_flags.DEFINE_config_file('config', None, 'configs/<file>.py:<arg>', lock_config=True)
  flags.DEFINE_integer('batch_size', None, 'batch size of the measured training step '
                       '(default: config.batch_size).')
  flags.mark_flag_as_required('config')
  app.run(main)
