"""What the machine does wrong during a run, each ended as an errors.MachineFault (exit code 3)
that names the fault and the way out; nothing of a finished checkpoint is lost.

- A full disk (`disk_full_in_run`): what could not be written, the free space of the run
  directory's filesystem, the last checkpoint whose save finished, and that the same command
  resumes from it once space is freed. The unfinished save itself is removed
  (trainer/checkpoint_storage.py), the half-written metrics record cut off (trainer/metrics.py).
- A lost process in a multi-process run (`lost_process`): the others stop within a bounded time,
  naming it, instead of waiting in a collective (jax.distributed's timeouts: trainer/sharding.py).
- A step larger than the memory (`check_step_memory`): before the first step, the compiled
  step's size against the memory available, and the flags that shrink it, instead of the kernel
  killing the process mid-step.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

import jax

from poolformers_jax import errors
from poolformers_jax.trainer import checkpoint as checkpoint_lib, sharding

# How long the processes that caught a failed collective wait for each other to report present
# (`lost_process`): well inside sharding.HEARTBEAT_TIMEOUT_S, after which jax ends them itself.
NAMING_WAIT_S = 10
# What a collective says when a process it waits on is gone (gloo on CPU, NCCL, the coordination
# service).
_PEER_GONE = ('Connection closed by peer', 'Connection reset by peer', 'Broken pipe',
              'remote process exited', 'heartbeat', 'unhealthy')
_PRESENT_KEY = 'poolformers_jax/present/'


class LostProcess(errors.MachineFault):
  """A process of a multi-process run is gone; this one leaves at once (jax's own shutdown would
  wait for the lost one, then abort)."""
  leave_at_once = True


class OutOfMemory(errors.MachineFault):
  """The compiled step needs more memory than the machine has available."""


def _resume_from(workdir: str) -> str:
  """What stands in `workdir` and where the same command resumes."""
  steps = checkpoint_lib.finished_steps(workdir)
  if not steps:
    return 'no checkpoint was finished yet: the same command starts again from step 0'
  step_dir = os.path.join(workdir, checkpoint_lib.LATEST_DIR, str(steps[-1]))
  size = sum(os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(step_dir) for name in names)
  return (f'checkpoint {steps[-1]} is intact ({step_dir}, {errors.size_text(size)}): the same '
          f'command resumes from step {steps[-1]}')


def disk_full_in_run(error: BaseException, workdir: str) -> errors.DiskFull:
  """The error of a run stopped by a full disk (`error`: a DiskFull naming what was not
  written, or any error errors.is_disk_full recognises)."""
  what = getattr(error, 'what', None) or getattr(error, 'filename', None) or f'a file of {workdir}'
  return errors.DiskFull(what, workdir, f'{_resume_from(workdir)} once space is freed')


def _absent_processes() -> list[int] | None:
  """The processes that do not report present within NAMING_WAIT_S (through the coordination
  service's key-value store, which every process that caught the same failed collective
  writes to); None when the service itself cannot be reached (process 0, which runs it, is
  gone)."""
  from jax._src import distributed  # pylint: disable=g-import-not-at-top  (its client)
  client, me, count = distributed.global_state.client, jax.process_index(), jax.process_count()
  if client is None:   # no coordination service in this process: no one to ask
    return None
  answer: dict[str, Any] = {}

  def ask():
    try:
      client.key_value_set(f'{_PRESENT_KEY}{me}', '1')
      deadline = time.monotonic() + NAMING_WAIT_S
      while True:
        present = {int(key.rsplit('/', 1)[-1]) for key, _ in
                   client.key_value_dir_get(_PRESENT_KEY)}
        if len(present) == count or time.monotonic() > deadline:
          break
        time.sleep(0.2)
      answer['absent'] = sorted(set(range(count)) - present)
    except Exception:  # pylint: disable=broad-except  (the service is gone)
      answer['absent'] = None

  thread = threading.Thread(target=ask, daemon=True, name='lost-process')
  thread.start()
  thread.join(NAMING_WAIT_S + 5)   # a call that hangs: the service's host is unreachable
  return answer.get('absent')


def lost_process(error: BaseException, workdir: str) -> LostProcess | None:
  """In a multi-process run, a collective that failed because a process is gone -> the line
  naming it; None for any other error (every process reported present: not a lost one)."""
  if jax.process_count() == 1 or not any(text in str(error) for text in _PEER_GONE):
    return None
  absent = _absent_processes()
  if absent == []:
    return None
  count, me = jax.process_count(), jax.process_index()
  lost = ('process 0, which runs the coordination service, cannot be reached' if absent is None
          else f'process {", ".join(map(str, absent))} of {count} is lost')
  return LostProcess(
      f'{lost} (killed, crashed, or its host is gone): process {me} stops too instead of '
      f'waiting for it; {_resume_from(workdir)} when every process is started again')


def available_memory() -> tuple[int, str]:
  """(bytes the training step may still allocate, where): the smallest free device memory
  (memory_stats: bytes_limit - bytes_in_use) on accelerators; on the CPU, the host's available
  memory (MemAvailable, or the cgroup's limit where lower), which its devices share."""
  device = jax.local_devices()[0]
  stats = device.memory_stats() or {}
  if 'bytes_limit' in stats:
    free = min((d.memory_stats() or {}).get('bytes_limit', 0) -
               (d.memory_stats() or {}).get('bytes_in_use', 0) for d in jax.local_devices())
    return free, f'{device.device_kind} memory per device'
  free = os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
  try:
    with open('/proc/meminfo') as f:
      free = next(int(line.split()[1]) * 1024 for line in f if line.startswith('MemAvailable:'))
  except (OSError, StopIteration, ValueError):
    pass
  try:
    with open('/sys/fs/cgroup/memory.max') as f, open('/sys/fs/cgroup/memory.current') as g:
      free = min(free, int(f.read()) - int(g.read()))
  except (OSError, ValueError):   # no cgroup v2 limit ('max')
    pass
  return free, 'host memory'


def step_memory_error(memory: dict[str, int], setup, *, available: int, where: str,
                      devices: int) -> OutOfMemory | None:
  """The line of a step that does not fit, or None: what the compiled step allocates beyond
  its arguments (the state, already in memory), `memory` (step.memory_of) per device times the
  `devices` that share `available` bytes of `where`; the advice names the sizes of `setup`."""
  per_device = memory['temp'] + memory['output'] - memory['alias']
  needed = per_device * devices
  if needed <= available:
    return None
  shared = (f' ({errors.size_text(per_device)} per device x {devices} devices)' if devices > 1
            else '')
  fsdp, sequence = (sharding.axis_size(setup.mesh, a)
                    for a in (sharding.FSDP_AXIS, sharding.SEQUENCE_AXIS))
  return OutOfMemory(
      f'the compiled train step needs {errors.size_text(needed)} of {where} beyond its state'
      f'{shared} and {errors.size_text(max(available, 0))} is available: the process would be '
      f'killed; shrink the step with --config.batch_size (now {setup.batch_size}), '
      f'--config.optimizer.grad_accum_steps (micro-batches, now {setup.grad_accum_steps}), '
      f'--config.mesh.fsdp (parameters and optimizer state split, now {fsdp}) or '
      f'--config.mesh.sequence (tokens split, now {sequence})')


def check_step_memory(memory: dict[str, int], setup) -> None:
  """Raises OutOfMemory before the first step when the compiled step does not fit the memory
  available now (`available_memory`)."""
  available, where = available_memory()
  devices = (sum(d.process_index == jax.process_index() for d in setup.mesh.devices.flat)
             if where == 'host memory' else 1)
  error = step_memory_error(memory, setup, available=available, where=where, devices=devices)
  if error is not None:
    raise error


def machine_fault(error: BaseException, workdir: str) -> errors.MachineFault | None:
  """The fault that stopped a run with `error` (a full disk, a lost process), else None."""
  if isinstance(error, errors.MachineFault) and not isinstance(error, errors.DiskFull):
    return error
  if errors.is_disk_full(error):
    return disk_full_in_run(error, workdir)
  return lost_process(error, workdir)
