"""What a run costs on an accelerator this machine does not have: the training step (and the eval
step) compiled for a TPU slice (libtpu's compile-only topologies; any machine, no TPU needed), or
exported for CUDA as StableHLO (`jax.export`; a GPU compile needs a GPU).

    python -m poolformers_jax.summary --config configs/lra_listops.py:ponet --topology v5e:2x2

Per device of the slice (the mesh of config.mesh spans all of them: data parallel by default,
`--config.mesh.fsdp` / `sequence` to split the state / the tokens), from the compiled TPU program:
the parameter and optimizer bytes each device holds,
`memory_analysis()` (arguments + outputs + temporaries - aliased) against the chip's HBM,
`cost_analysis()` flops and bytes accessed, the collectives in the program text, XLA's own time
estimate (`optimal_seconds`), and a roofline estimate from the chip's published peaks:

    t_step = max(flops / peak_flops,  bytes / hbm_bandwidth,  t_collective)
    t_collective = 2 (n - 1) / n * all-reduce bytes / ici_bandwidth     (ring all-reduce, n devices)

It is a lower bound (perfect overlap, peak rates), labelled by its largest term: "flops",
"memory" (HBM bytes) or "ici". float32 matmuls count at the bf16 peak: XLA:TPU runs them as
bf16 passes at jax's default precision. XLA's estimate is reported beside it, never used: it can
be negative (docs/accelerators.md).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import os
import re
import tempfile
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from poolformers_jax.config.validate import ConfigError
from poolformers_jax.trainer import sharding, step as step_lib
from poolformers_jax.trainer.setup import Setup, setup_with_config

LIBTPU_PIN = 'libtpu==0.0.42.1'   # what jax[tpu]==0.10.2 pins


class AcceleratorError(ValueError):
  """A request this module cannot serve (no libtpu, unknown slice), and what to do."""


@dataclasses.dataclass(frozen=True)
class Chip:
  """Published per-chip figures (Cloud TPU system architecture pages; `source` is the page)."""
  device_kind: str            # jax's Device.device_kind for this chip
  devices_per_chip: int       # jax devices per chip in libtpu's compile-only topology
  hbm_bytes: float
  peak_flops: float           # bf16 FLOP/s
  hbm_bandwidth: float        # bytes/s
  ici_bandwidth: float | None   # bidirectional bytes/s per chip (None: not published)
  source: str

  def per_device(self, value: float) -> float:
    return value / self.devices_per_chip


GB, GIB = 1e9, 2.0 ** 30
CHIPS = {
    # v4: two TensorCores per chip; the compile-only topology makes each a device (no megacore).
    'v4': Chip('TPU v4', 2, 32 * GIB, 275e12, 1200 * GB, None,
               'https://cloud.google.com/tpu/docs/v4'),
    'v5e': Chip('TPU v5 lite', 1, 16 * GB, 197e12, 819 * GB, 400 * GB,
                'https://cloud.google.com/tpu/docs/v5e'),
    'v5p': Chip('TPU v5', 1, 95 * GIB, 459e12, 2765 * GB, 1200 * GB,
                'https://cloud.google.com/tpu/docs/v5p'),
    'v6e': Chip('TPU v6 lite', 1, 32 * GB, 918e12, 1638 * GB, 800 * GB,
                'https://cloud.google.com/tpu/docs/v6e'),
}
TOPOLOGY_EXAMPLES = ('v5e:2x2', 'v5e:2x4', 'v4:2x2x1', 'v5p:2x2x1', 'v6e:2x2')


def chip_of(topology: str) -> Chip:
  version = topology.split(':')[0]
  if version not in CHIPS or ':' not in topology:
    raise AcceleratorError(
        f'--topology {topology!r}: give <chip>:<shape> with chip one of {", ".join(CHIPS)}, '
        f'e.g. {", ".join(TOPOLOGY_EXAMPLES)}.')
  return CHIPS[version]


@contextlib.contextmanager
def _stderr_to(path: str):
  """Sends file descriptor 2 to `path` (libtpu writes its host-lookup warnings there from C++)."""
  saved = os.dup(2)
  with open(path, 'w') as sink:
    os.dup2(sink.fileno(), 2)
    try:
      yield
    finally:
      os.dup2(saved, 2)
      os.close(saved)


def topology_mesh(topology: str, sizes: dict[str, int] | None = None) -> Mesh:
  """The ('data', 'fsdp', 'sequence') mesh (`sizes`: config.mesh; default data parallel) over the
  compile-only devices of a TPU slice, e.g. 'v5e:2x2' (4 chips). Programs compiled on it are
  real TPU executables; they cannot run here."""
  chip = chip_of(topology)
  if importlib.util.find_spec('libtpu') is None:
    raise AcceleratorError(f'compiling for a TPU slice needs libtpu: pip install {LIBTPU_PIN} '
                           '(about 700 MB; CPU machines only compile with it).')
  # Compiling holds no chip: let processes (pytest workers, a training) load libtpu side by side.
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
  from jax.experimental import topologies
  with tempfile.NamedTemporaryFile('r', suffix='.log') as log:
    try:
      with _stderr_to(log.name):
        devices: list[jax.Device] = topologies.get_topology_desc(
            topology_name=topology, platform='tpu').devices
    except Exception as error:   # libtpu's message says what it could not parse
      first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
      raise AcceleratorError(f'--topology {topology!r}: {first}') from None
  if devices[0].device_kind != chip.device_kind:
    raise AcceleratorError(f'--topology {topology!r} gave {devices[0].device_kind!r} devices, '
                           f'not {chip.device_kind!r}.')
  try:
    return sharding.make_mesh(sizes=sizes, devices=devices)
  except ValueError as error:
    raise ConfigError(f'--topology {topology!r}: {error}') from None


# ------------------------------------------------------------------ reading compiled programs

_DTYPE_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 's16': 2, 'u16': 2, 'f16': 2, 'bf16': 2, 's32': 4,
                'u32': 4, 'f32': 4, 's64': 8, 'u64': 8, 'f64': 8, 'c64': 8, 'c128': 16}


def collectives(hlo_text: str) -> dict[str, dict[str, int]]:
  """{kind: {'count', 'bytes'}} of the cross-device collectives in a compiled program's text
  (`sharding.collective_ops`); bytes = the sizes of their results. An async '-start' counts once;
  its result tuple holds the operand beside the result, so half of it is counted."""
  found: dict[str, dict[str, int]] = {}
  for op in sharding.collective_ops(hlo_text):
    size = sum(_DTYPE_BYTES.get(dtype, 0) * math.prod(shape) for dtype, shape in op.arrays)
    total = found.setdefault(op.op, {'count': 0, 'bytes': 0})
    total['count'] += 1
    total['bytes'] += size // 2 if op.start and len(op.arrays) > 1 else size
  return {kind: found[kind] for kind in sharding.COLLECTIVES if kind in found}


def _cost(compiled) -> dict[str, float]:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return {'flops': float(cost.get('flops', 0.0)),
          'bytes_accessed': float(cost.get('bytes accessed', 0.0)),
          'xla_seconds': float(cost.get('optimal_seconds', float('nan')))}


def roofline(chip: Chip, num_devices: int, flops: float, bytes_accessed: float,
             all_reduce_bytes: float) -> dict[str, Any]:
  """Seconds of one step per device at the chip's peaks (see the module docstring)."""
  terms = {'flops': flops / chip.per_device(chip.peak_flops),
           'memory': bytes_accessed / chip.per_device(chip.hbm_bandwidth)}
  ici = None if chip.ici_bandwidth is None else chip.per_device(chip.ici_bandwidth)
  if ici and num_devices > 1:
    terms['ici'] = 2 * (num_devices - 1) / num_devices * all_reduce_bytes / ici
  bound = max(terms, key=terms.__getitem__)
  return {'seconds': terms[bound], 'bound': bound,
          **{f'{name}_seconds': value for name, value in terms.items()}}


def program_report(compiled, chip: Chip, num_devices: int) -> dict[str, Any]:
  """Memory, cost, collectives and time of one compiled TPU program, per device."""
  memory = step_lib.memory_of(compiled)
  cost = _cost(compiled)
  found = collectives(compiled.as_text())
  all_reduce = found.get('all-reduce', {}).get('bytes', 0)
  hbm = chip.per_device(chip.hbm_bytes)
  return {'memory': memory, 'hbm_bytes': int(hbm), 'fits': memory['total'] <= hbm,
          **cost, 'collectives': found,
          'roofline': roofline(chip, num_devices, cost['flops'], cost['bytes_accessed'],
                               all_reduce)}


def fit_advice(topology: str, config, *, devices: int, temp: float, fixed: float,
               hbm: float) -> str:
  """The message for a training step that does not fit a chip: by how much, and the gradient
  accumulation that keeps the global batch while cutting the per-chip one. Temporaries
  (activations) scale with the per-chip batch; `fixed` bytes (parameters, optimizer state,
  outputs) do not, so when they alone exceed the chip only sharding them would help."""
  gib, batch = 2 ** 30, int(config.batch_size)
  per_device = batch // devices
  need = (f'{topology}: the training step needs {(fixed + temp) / gib:.1f} GiB per chip, the '
          f'chip has {hbm / gib:.1f} GiB')
  k = 2
  while k <= per_device and fixed + temp / k > hbm:
    k *= 2
  if fixed >= hbm or k > per_device or batch % k:
    return (f'{need}; parameters and optimizer state alone take {fixed / gib:.1f} GiB: split '
            f'them over the chips with --config.mesh.fsdp={devices} --config.mesh.data=1, or '
            'use a slice with more chips')
  # Steps and warmup count micro-batches: times k keeps the schedule.
  return (f'{need}: try --config.batch_size={batch // k} --config.optimizer.grad_accum_steps='
          f'{int(config.optimizer.grad_accum_steps) * k} --config.num_train_steps='
          f'{int(config.num_train_steps) * k} --config.optimizer.warmup_steps='
          f'{int(config.optimizer.warmup_steps) * k} (the same updates of the same global batch, '
          f'~{(fixed + temp / k) / gib:.1f} GiB estimated: check with this command)')


def _compile_or_advise(config, setup: Setup, topology: str):
  """The compiled training step of `config`'s `setup`; libtpu refuses one whose temporaries
  exceed the chip (RESOURCE_EXHAUSTED at compile time): then the change that makes it fit."""
  try:
    return step_lib.compile_train_step(setup).run
  except jax.errors.JaxRuntimeError as e:
    found = re.search(r'HLO temporaries \(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)', str(e))
    if not found:
      raise
    fixed = per_device_bytes(step_lib.abstract_step_args(setup))
    temp, hbm = (float(g) * 2 ** 30 for g in found.groups())
    raise ValueError(fit_advice(topology, config, devices=setup.mesh.devices.size,
                                 temp=temp, fixed=fixed, hbm=hbm)) from None


def per_device_bytes(tree: Any) -> int:
  """Bytes per device of the sharded abstract arrays of `tree`."""
  return sum(math.prod(x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape)
             * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


# ------------------------------------------------------------------ the reports

def compile_for_topology(config, topology: str) -> tuple[Setup, Any, Any]:
  """(setup on the slice's mesh, compiled train step, compiled eval step) of `config`; the
  dataset's files are not needed. The config's batch sizes are global, split over the slice."""
  sizes = {axis: int(config.mesh[axis]) for axis in sharding.MESH_AXES}
  config, setup = setup_with_config(config, need_files=False, mesh=topology_mesh(topology, sizes))
  _one_program(setup)
  return setup, _compile_or_advise(config, setup, topology), step_lib.compile_eval_step(setup)


def topology_report(config, topology: str) -> dict[str, Any]:
  """The training and eval steps of `config` compiled for `topology`, with the time to train
  `num_train_steps` at the roofline estimate."""
  chip = chip_of(topology)
  setup, train, eval_step = compile_for_topology(config, topology)
  n = setup.mesh.devices.size
  train_report = program_report(train, chip, n)
  steps = setup.num_train_steps
  state = setup.abstract_state
  return {
      'topology': topology, 'device_kind': chip.device_kind, 'devices': n,
      'mesh': dict(setup.mesh.shape),
      'state_bytes_per_device': {'params': per_device_bytes(state.params),
                                 'optimizer': per_device_bytes(state.opt_state)},
      'devices_per_chip': chip.devices_per_chip, 'chip_source': chip.source,
      'batch_size': setup.batch_size,
      'per_device_batch': setup.batch_size // sharding.batch_devices(setup.mesh),
      'eval_batch_size': setup.eval_batch_size, 'num_train_steps': steps,
      'train_step': train_report, 'eval_step': program_report(eval_step, chip, n),
      'train_hours': steps * train_report['roofline']['seconds'] / 3600,
  }


def _one_program(setup: Setup) -> None:
  """The reports and the export take the step as one program; the bucketed one is several."""
  if setup.bucket_multiple:
    raise ConfigError('config.length_buckets makes the training step one program per '
                      'bucket length, which this report does not take; set '
                      '--config.length_buckets.multiple=0 (the same update, one program)')


def export_for_cuda(setup: Setup) -> Any:
  """The training step of `setup` exported for CUDA (`jax.export`, StableHLO): what a GPU would
  compile, lowered on this machine. The mesh is the setup's (one device per mesh device)."""
  _one_program(setup)
  return jax.export.export(step_lib.make_train_step(setup, 'cuda'), platforms=['cuda'])(
      *step_lib.abstract_step_args(setup))
