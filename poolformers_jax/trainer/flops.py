"""How much arithmetic a training step is, counted three ways, and what a device can do at most.

- XLA's count (step.step_flops): `cost_analysis()['flops']` of the compiled training step, read
  once after compiling: forward + backward + the optimizer update as XLA compiled them
  (rematerialised forwards counted again, elementwise work included, a multiply-add as 2), per
  device: the program XLA partitioned over the mesh is one device's share. On a GPU, where the
  compiled count leaves out the dots cuBLAS runs, the unoptimised program's count / devices.
- The model's count: 6 x the forward's matmul + convolution MACs (`count_macs`, what `summary`
  reports as `macs`; attention and every mixer's own products included) x examples: a forward of
  2 FLOPs per MAC and a backward of twice that, Kaplan et al.'s 6 N D with each mixer's term.
- 6 N D itself (parameters x tokens x 6), for token inputs, the usual rule of thumb.

`peak_flops(device_kind, dtype)`: the dense peak of a device for a compute dtype where it is
published (TPUs: accelerators.CHIPS; NVIDIA A100 / H100 / H200: the vendors' data sheets), None
elsewhere (CPUs): an MFU is reported only against a known peak.
"""
from __future__ import annotations

import math
from typing import Any

import jax

from poolformers_jax import tasks
from poolformers_jax.trainer import accelerators
from poolformers_jax.trainer.setup import Setup, param_count, variables_of

# Dense bf16 peak FLOP/s of a jax device, by device_kind prefix, most specific first (data
# sheets, without sparsity; SXM H100 / H200: 989 TFLOP/s).
PEAK_BF16_FLOPS = (('NVIDIA H200 NVL', 835e12), ('NVIDIA H200', 989e12),
                   ('NVIDIA H100 NVL', 835e12), ('NVIDIA H100 PCIe', 756e12),
                   ('NVIDIA H100', 989e12), ('NVIDIA A100', 312e12))
# float32 dots run as TF32 on these GPUs at XLA's default precision, whose dense peak is half
# the bf16 one; on a TPU as bf16 passes, at the bf16 peak (accelerators.py).
TF32_SHARE = 0.5


def peak_bf16_flops(device_kind: str) -> float | None:
  """The device's dense bf16 peak FLOP/s, or None (an unknown card, a CPU). A TPU v4 chip is one
  jax device at run time (megacore)."""
  for chip in accelerators.CHIPS.values():
    if device_kind == chip.device_kind:
      return chip.peak_flops
  return next((peak for prefix, peak in PEAK_BF16_FLOPS if device_kind.startswith(prefix)), None)


def peak_flops(device_kind: str, dtype: str) -> float | None:
  """The dense peak FLOP/s of a device computing in `dtype` (config.model.dtype), or None."""
  peak = peak_bf16_flops(device_kind)
  if peak is None or dtype != 'float32' or not device_kind.startswith('NVIDIA'):
    return peak
  return peak * TF32_SHARE


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


def forward_macs(model, inputs: Any, variables: Any = None) -> int:
  """Matmul + convolution MACs of one deterministic forward of `inputs`, traced, not run."""
  if variables is None:
    variables = abstract_variables(model, inputs)
  forward = lambda v, x: model.apply(v, x, deterministic=True)
  return count_macs(jax.make_jaxpr(forward)(variables, inputs))


def abstract_variables(model, inputs):
  return jax.eval_shape(lambda x: model.init({'params': jax.random.PRNGKey(0),
                                              'dropout': jax.random.PRNGKey(1)}, x,
                                             deterministic=True), inputs)


def model_flops(model, one_example: Any, variables: Any, *, batch_size: int,
                num_params: int, tokens_per_example: int) -> dict[str, float]:
  """The model's count of a training step of `batch_size` examples (see the module docstring):
  'model_step_flops' (6 x forward MACs) and, for token inputs, 'model_6nd_step_flops'."""
  out = {'model_step_flops': 6.0 * forward_macs(model, one_example, variables) * batch_size}
  if tokens_per_example:
    out['model_6nd_step_flops'] = 6.0 * num_params * tokens_per_example * batch_size
  return out


def setup_model_flops(setup: Setup) -> dict[str, float]:
  """`model_flops` of a training step of `setup` (config.batch_size examples)."""
  one = jax.tree.map(lambda s: jax.ShapeDtypeStruct((1, *s.shape), s.dtype),
                     tasks.train_example(setup.info))
  tokens = math.prod(setup.info.input_shape) if setup.info.vocab_size is not None else 0
  variables = variables_of(setup.abstract_state)
  return model_flops(setup.model, setup.task.model_inputs(one), variables,
                     batch_size=setup.batch_size,
                     num_params=param_count(setup.abstract_state.params),
                     tokens_per_example=tokens)
