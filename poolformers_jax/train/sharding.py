"""Devices: multi-host start-up, the data-parallel `Mesh`, and host batches -> global arrays.

One mesh axis, 'data'. Parameters and optimizer state are replicated; every batch is split over
'data'. Each process feeds only its own slice of the global batch and
`jax.make_array_from_process_local_data` assembles the global array, so the same code runs on
one CPU, 8 fake CPU devices, or many hosts. No pmap.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = 'data'

# Environment variables that start a multi-process run (also settable as train.py flags).
COORDINATOR_ENV = ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID')


def maybe_initialize_distributed(coordinator_address: Optional[str] = None,
                                 num_processes: Optional[int] = None,
                                 process_id: Optional[int] = None) -> bool:
  """Calls `jax.distributed.initialize` when coordinator settings are given (args or env).

  Also initializes under SLURM / Open MPI with more than one task, where jax finds the settings
  itself. Returns True if a multi-process run was started. CPU collectives use gloo.
  """
  address = coordinator_address or os.environ.get('JAX_COORDINATOR_ADDRESS')
  cluster = int(os.environ.get('SLURM_NTASKS', os.environ.get('OMPI_COMM_WORLD_SIZE', '1'))) > 1
  if not address and not cluster:
    return False
  if jax.distributed.is_initialized():
    return True
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  kwargs: dict[str, Any] = {}
  if address:
    num = num_processes if num_processes is not None else os.environ.get('JAX_NUM_PROCESSES')
    pid = process_id if process_id is not None else os.environ.get('JAX_PROCESS_ID')
    if num is None or pid is None:
      raise ValueError('a coordinator address was given without the number of processes and '
                       'this process id; set JAX_NUM_PROCESSES and JAX_PROCESS_ID (or the '
                       '--num_processes / --process_id flags).')
    kwargs = dict(coordinator_address=address, num_processes=int(num), process_id=int(pid))
  jax.distributed.initialize(**kwargs)
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


def check_batch_size(batch_size: int, mesh: Mesh, what: str) -> int:
  """The per-process share of a global batch; it must split evenly over devices and processes."""
  devices, processes = mesh.devices.size, jax.process_count()
  if batch_size % devices or batch_size % processes:
    raise ValueError(f'{what}={batch_size} must be divisible by the number of devices '
                     f'({devices}) and processes ({processes}).')
  return batch_size // processes


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """This process's slice of the batch -> arrays sharded over 'data' across all processes."""
  sharding = batch_sharded(mesh)   # every leaf (targets may be a dict of arrays)
  return jax.tree.map(lambda v: jax.make_array_from_process_local_data(sharding, np.asarray(v)),
                      local_batch)
