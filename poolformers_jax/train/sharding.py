"""Devices: multi-host start-up, the data-parallel `Mesh`, and host batches -> global arrays.

One mesh axis, 'data'. Parameters and optimizer state are replicated; every batch is split over
'data'. Each process feeds only its own slice of the global batch and
`jax.make_array_from_process_local_data` assembles the global array, so the same code runs on
one CPU, 8 fake CPU devices, or many hosts. No pmap.
"""
from __future__ import annotations

import os
from typing import Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = 'data'

DISTRIBUTED_MODES = ('auto', 'on', 'off')


def maybe_initialize_distributed(mode: str = 'auto', coordinator_address: Optional[str] = None,
                                 num_processes: Optional[int] = None,
                                 process_id: Optional[int] = None) -> bool:
  """Starts a multi-process run with `jax.distributed.initialize`; returns whether one runs.

  mode 'off': one process. 'on': always; settings not given here are found by jax (SLURM, Open
  MPI, Cloud TPU pods, Kubernetes; JAX_COORDINATOR_ADDRESS). 'auto': as 'on' when settings are
  given or jax finds a cluster, else one process. Called by the programs (train, eval: from
  --distributed) and by `train_and_evaluate(..., distributed=mode)` only: a library call starts
  nothing unasked. Nothing is kept here: jax.distributed itself says whether a run started.
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
  explicit = [v for v in (coordinator_address, os.environ.get('JAX_COORDINATOR_ADDRESS'), num, pid)
              if v is not None]
  try:
    jax.distributed.initialize(coordinator_address, None if num is None else int(num),
                               None if pid is None else int(pid))
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
  """Leaves a multi-process run right after its last collective, while every process is at the
  same point. Left to interpreter exit, the shutdown barrier (300 s) can time out when one
  process is slow to exit (joining library threads), which aborts the other processes."""
  if jax.distributed.is_initialized():
    jax.distributed.shutdown()


def make_mesh(num_devices: int = -1) -> Mesh:
  """A 1-D 'data' mesh over all devices (or the first `num_devices` of this single process)."""
  devices = jax.devices()
  if num_devices not in (-1, None, len(devices)):
    if jax.process_count() > 1:
      raise ValueError('config.num_devices must be -1 in a multi-process run.')
    if not 0 < num_devices <= len(devices):
      raise ValueError(f'config.num_devices={num_devices} but {len(devices)} devices exist.')
    devices = devices[:num_devices]
  return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharded(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(DATA_AXIS))


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """This process's slice of the batch -> arrays sharded over 'data' across all processes."""
  sharding = batch_sharded(mesh)   # every leaf (targets may be a dict of arrays)
  return jax.tree.map(lambda v: jax.make_array_from_process_local_data(sharding, np.asarray(v)),
                      local_batch)
