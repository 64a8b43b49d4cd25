"""Devices: multi-host start-up, the named `Mesh`, where each array lives on it, host batches ->
global arrays, and what a compiled program moves between devices (`collective_ops`).

The mesh has three named axes (config.mesh, docs/training.md#sharding):
  data      examples split, everything else replicated (data parallel; the default: all devices);
  fsdp      examples split too, and every large parameter and its optimizer state split on one
            dimension (FSDP, ZeRO-3): XLA gathers a weight where it is used and reduce-scatters
            its gradient;
  sequence  the tokens of every example split (sequence parallelism): the mixers that declare a
            sequence-parallel form run on their shard and exchange only what their maths needs.
Each process feeds only its own slice of the global batch, which
`jax.make_array_from_process_local_data` assembles, so the same code runs on one CPU, 8 fake CPU
devices, or many hosts.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from poolformers_jax.layers.sequence_parallel import SEQUENCE_AXIS

DATA_AXIS, FSDP_AXIS = 'data', 'fsdp'
MESH_AXES = (DATA_AXIS, FSDP_AXIS, SEQUENCE_AXIS)   # outer to inner: 'sequence' varies fastest
BATCH_AXES = (DATA_AXIS, FSDP_AXIS)                 # the axes that split the examples
POSITION_TABLE = 'pos_embedding'   # a learned position table's parameter

DISTRIBUTED_MODES = ('auto', 'on', 'off')
# jax.distributed.initialize's timeouts (jax's: 100 and 300 s). A process whose heartbeats (sent
# by a thread of their own, even while compiling) are silent this long is declared lost and jax
# ends the others: the bound on a frozen host's hold on a collective. A minute tolerates a host
# stalled under load and leaves the others time to name the lost one (faults.NAMING_WAIT_S).
# SHUTDOWN_TIMEOUT_S bounds jax.distributed.shutdown's barrier (`shutdown_distributed`).
HEARTBEAT_TIMEOUT_S = 60
SHUTDOWN_TIMEOUT_S = 60


def maybe_initialize_distributed(mode: str = 'auto', coordinator_address: str | None = None,
                                 num_processes: int | None = None,
                                 process_id: int | None = None) -> bool:
  """Starts a multi-process run with `jax.distributed.initialize`; returns whether one runs.

  mode 'off': one process. 'on': always; settings not given here are found by jax (SLURM, Open
  MPI, Cloud TPU pods, Kubernetes; JAX_COORDINATOR_ADDRESS). 'auto': as 'on' when settings are
  given or jax finds a cluster, else one process. Only the programs (--distributed) and
  `train_and_evaluate(..., distributed=mode)` call it: a library call starts nothing unasked.
  """
  if mode not in DISTRIBUTED_MODES:
    raise ValueError(f'distributed={mode!r}; choose one of {DISTRIBUTED_MODES}.')
  if jax.distributed.is_initialized():
    return True
  if mode == 'off':
    return False
  # What jax lacks: it reads JAX_COORDINATOR_ADDRESS but not the process count and id.
  num = num_processes if num_processes is not None else os.environ.get('JAX_NUM_PROCESSES')
  pid = process_id if process_id is not None else os.environ.get('JAX_PROCESS_ID')
  explicit = [v for v in (coordinator_address, os.environ.get('JAX_COORDINATOR_ADDRESS'), num,
                          pid) if v is not None]
  try:
    jax.distributed.initialize(coordinator_address, None if num is None else int(num),
                               None if pid is None else int(pid),
                               heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
                               shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S)
  except (ValueError, RuntimeError) as error:
    # Raised before any connection: no cluster / incomplete settings (ValueError), or JAX already
    # computed in this process (RuntimeError: a library call after other work is single-process).
    if mode == 'on' or explicit:
      raise ValueError(
          f'jax.distributed.initialize: {error} Give --coordinator_address, --num_processes and '
          '--process_id (or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID), run under '
          'a cluster jax detects (SLURM, Open MPI, Cloud TPU, Kubernetes), or pass '
          '--distributed=off.') from None
    return False
  return True


def shutdown_distributed() -> None:
  """Leaves a multi-process run right after its last collective, with every process at the same
  point (at interpreter exit one slow process can time the barrier out and abort the others)."""
  if jax.distributed.is_initialized():
    jax.distributed.shutdown()


def mesh_sizes(num_devices: int, sizes: Mapping[str, int]) -> dict[str, int]:
  """{axis: size} of a mesh over `num_devices`: `sizes` gives some (-1 = what the others leave,
  at most one; an axis left out is 1, except 'data', which takes the rest)."""
  given = {axis: int(sizes.get(axis, -1 if axis == DATA_AXIS else 1)) for axis in MESH_AXES}
  unknown = sorted(set(sizes) - set(MESH_AXES))
  if unknown:
    raise ValueError(f'config.mesh has no axis {unknown}; the axes are {list(MESH_AXES)}.')
  rest = [a for a, n in given.items() if n == -1]
  bad = [a for a, n in given.items() if n == 0 or n < -1]
  if bad or len(rest) > 1:
    raise ValueError(f'config.mesh sizes {given}: each must be a positive size or -1 (the rest), '
                     f'at most one -1; e.g. --config.mesh.fsdp={num_devices} '
                     '--config.mesh.data=1.')
  fixed = int(np.prod([n for n in given.values() if n != -1]))
  if rest:
    if num_devices % fixed:
      raise ValueError(f'config.mesh {given}: the fixed sizes ({fixed} devices) do not divide the '
                       f'{num_devices} devices; use sizes whose product divides {num_devices}.')
    given[rest[0]] = num_devices // fixed
  elif fixed != num_devices:
    raise ValueError(f'config.mesh {given} spans {fixed} devices, this run has {num_devices}; '
                     'set one axis to -1 (the rest) or sizes that multiply to the devices.')
  return given


def make_mesh(num_devices: int = -1, sizes: Mapping[str, int] | None = None,
              devices: Sequence[Any] | None = None) -> Mesh:
  """The ('data', 'fsdp', 'sequence') mesh over `devices` (default: all of jax's; or the first
  `num_devices` of this single process); `sizes`: config.mesh (default: data parallel)."""
  devices = list(jax.devices() if devices is None else devices)
  if num_devices not in (-1, None, len(devices)):
    if jax.process_count() > 1:
      raise ValueError('config.num_devices must be -1 in a multi-process run.')
    if not 0 < num_devices <= len(devices):
      raise ValueError(f'config.num_devices={num_devices} but {len(devices)} devices exist.')
    devices = devices[:num_devices]
  shape = mesh_sizes(len(devices), sizes or {})
  return Mesh(np.asarray(devices).reshape([shape[a] for a in MESH_AXES]), MESH_AXES)


def axis_size(mesh: Mesh, axis: str) -> int:
  """The size of `axis` on `mesh` (1 when the mesh has no such axis)."""
  return int(mesh.shape.get(axis, 1))


def batch_axes(mesh: Mesh) -> tuple[str, ...]:
  """The mesh axes that split the examples of a batch."""
  return tuple(a for a in BATCH_AXES if a in mesh.axis_names)


def batch_devices(mesh: Mesh) -> int:
  """How many ways a batch's examples are split (data x fsdp): what its size must divide by."""
  return int(np.prod([axis_size(mesh, a) for a in BATCH_AXES]))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharded(mesh: Mesh, ndim: int = 1) -> NamedSharding:
  """Where a batch array of rank `ndim` lives: examples over the batch axes, and a token axis
  (dim 1 of a rank >= 2 array: inputs, per-token targets and weights) over 'sequence' when the
  mesh splits sequences."""
  if ndim >= 2 and axis_size(mesh, SEQUENCE_AXIS) > 1:
    return NamedSharding(mesh, P(batch_axes(mesh), SEQUENCE_AXIS))
  return NamedSharding(mesh, P(batch_axes(mesh)))


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """This process's slice of the batch -> global arrays sharded as `batch_sharded` says."""
  return jax.tree.map(lambda v: jax.make_array_from_process_local_data(
      batch_sharded(mesh, np.ndim(v)), np.asarray(v)), local_batch)


@dataclasses.dataclass(frozen=True)
class FsdpRules:
  """Which parameters (and their optimizer state) the 'fsdp' axis splits, and on which dimension.

  `overrides`: 'regex=spec' strings (config.mesh.rules, ';'-separated); the first whose regex is
  found in a leaf's path ('params/encoder/block_0/PoNet_0/query/kernel') wins; spec: a mesh axis
  or '' (not split) per dimension, comma-separated; '' alone replicates the leaf
  ('embedding=fsdp,' splits an embedding table's rows). Otherwise a leaf of at least `min_size`
  elements is split on its largest dimension the axis size divides (big_vision's `fsdp` rule).
  With sequence parallelism a learned position table's rows are split over 'sequence'.
  """
  overrides: tuple[str, ...] = ()
  min_size: int = 2**14

  def parsed(self) -> list[tuple[re.Pattern, tuple[str | None, ...]]]:
    out = []
    for rule in self.overrides:
      regex, sep, spec = str(rule).rpartition('=')
      axes = tuple(a.strip() or None for a in spec.split(',')) if spec.strip() else ()
      if not sep or any(a not in (None, *MESH_AXES) for a in axes):
        raise ValueError(f'config.mesh.rules entry {rule!r} is not "regex=spec" with spec a '
                         f'comma-separated axis per dimension from {list(MESH_AXES)} or empty; '
                         "e.g. --config.mesh.rules='embedding=fsdp,;bias='.")
      try:
        out.append((re.compile(regex), axes))
      except re.error as error:
        raise ValueError(f'config.mesh.rules entry {rule!r}: bad regex ({error}).') from None
    return out

  def spec(self, path: str, shape: Sequence[int], fsdp: int, sequence: int = 1) -> P:
    """The PartitionSpec of the leaf at `path` with `shape` on a mesh whose 'fsdp' and
    'sequence' sizes are `fsdp` and `sequence`."""
    for regex, axes in self.parsed():
      if regex.search(path):
        if axes and len(axes) != len(shape):
          raise ValueError(f'config.mesh.rules: {regex.pattern!r} gives {len(axes)} dimensions '
                           f'to {path} of shape {tuple(shape)}; give one per dimension.')
        return P(*axes)
    spec: list[str | None] = [None] * len(shape)
    rows = next((d for d, n in enumerate(shape) if n > 1), None)   # [1, L, D]: the positions
    if (sequence > 1 and POSITION_TABLE in path.split('/') and rows is not None
        and shape[rows] % sequence == 0):
      # A learned position table has a row per position: its gradient comes split over
      # 'sequence' like the tokens, so the table (and its optimizer state) stays split too.
      spec[rows] = SEQUENCE_AXIS
    if fsdp > 1 and int(np.prod(shape, dtype=np.int64)) >= self.min_size:
      dims = [d for d in np.argsort(shape, kind='stable')[::-1]
              if shape[d] % fsdp == 0 and spec[d] is None]
      if dims:
        spec[int(dims[0])] = FSDP_AXIS
    return P(*spec) if any(spec) else P()


def state_shardings(mesh: Mesh, abstract_state: Any, rules: FsdpRules = FsdpRules()) -> Any:
  """The NamedSharding of every leaf of a train state: scalars (step, counts) replicated, every
  other leaf as `rules` says (replicated on a mesh without 'fsdp')."""
  fsdp, sequence = axis_size(mesh, FSDP_AXIS), axis_size(mesh, SEQUENCE_AXIS)

  def one(path, leaf):
    shape = tuple(getattr(leaf, 'shape', ()))
    name = jax.tree_util.keystr(path, simple=True, separator='/')   # 'params/.../kernel'
    return NamedSharding(mesh, rules.spec(name, shape, fsdp, sequence) if shape else P())
  return jax.tree_util.tree_map_with_path(one, abstract_state)


# `%name = <result type> all-reduce(` or the async form `all-reduce-start(`; `-done` is skipped.
COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'collective-permute', 'all-to-all')
_COLLECTIVE = re.compile(r'=\s*(.*?)\s(' + '|'.join(COLLECTIVES) + r')(-start)?\(')
_ARRAY = re.compile(r'\b([a-z][a-z0-9]*)\[([\d,]*)\]')   # f32[8,4]{1,0}: dtype and shape


class Collective(NamedTuple):
  """One collective of a compiled program: `op` (of COLLECTIVES), whether it is an async `start`
  (whose result tuple holds the operand beside the result), and the (dtype, shape) of every
  array of its result type."""
  op: str
  start: bool
  arrays: tuple[tuple[str, tuple[int, ...]], ...]

  @property
  def moved(self) -> list[tuple[int, ...]]:
    """The shapes it moves: each array of a combined (tuple) result, as XLA merges the
    all-reduces of one step; an async start's first operand."""
    return [shape for _, shape in (self.arrays[:1] if self.start else self.arrays)]


def collective_ops(hlo_text: str) -> list[Collective]:
  """The cross-device collectives of a compiled program's text (`compiled.as_text()`), in order:
  what the sequence-parallel tests bound and what summary --topology counts."""
  found = []
  for line in hlo_text.splitlines():
    match = _COLLECTIVE.search(line)
    if match is not None:
      result, op, start = match.groups()
      found.append(Collective(op, bool(start), tuple(
          (dtype, tuple(int(n) for n in dims.split(',') if n))
          for dtype, dims in _ARRAY.findall(result))))
  return found
