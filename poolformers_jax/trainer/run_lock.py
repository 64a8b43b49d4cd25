"""One writer per run directory: DIR/run.lock names the process that trains DIR.

A second `train.py` on the workdir of a live run (a second terminal, a scheduler restarting a job
whose old process has not died) is refused before it compiles, naming the holder's host, pid and
start time. A lock whose holder is gone does not block a resume:
- same host: the holder is gone when no process has its pid and start time (a pid reused by
  another program has another start time);
- another host (a shared file system): the holder refreshes the file's time every
  `HEARTBEAT_S` seconds while it trains; a lock not refreshed for `STALE_AFTER_S` seconds is
  taken over (a lost host, a kill -9 there).
A multi-process run takes it in process 0 only. The lock is removed when the run ends, however
it ends, as long as the process can still run Python.
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import threading
import time
from typing import Any

from poolformers_jax import errors

LOCK_FILE = 'run.lock'
HEARTBEAT_S = 30.0
STALE_AFTER_S = 180.0


class RunInProgressError(FileExistsError):
  """Another live process trains this workdir (a FileExistsError: an input error, exit code 2)."""


def _start_ticks(pid: int) -> str | None:
  """The process's start time in clock ticks since boot (Linux), None where unknown."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[19]   # field 22; the name may hold spaces
  except (OSError, IndexError):
    return None


def _alive_here(holder: dict[str, Any]) -> bool:
  pid = int(holder.get('pid', -1))
  if pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:   # another user's process exists
    pass
  ticks = _start_ticks(pid)
  return ticks is None or holder.get('start_ticks') in (None, ticks)


def holder_alive(holder: dict[str, Any], age_s: float, host: str | None = None) -> bool:
  """Whether the process a lock names may still be training (see the module docstring)."""
  if holder.get('host') == (host or socket.gethostname()):
    return _alive_here(holder)
  return age_s < STALE_AFTER_S


class RunLock:
  """`with RunLock(workdir):` holds DIR/run.lock for the block (process 0 of a run)."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.path = os.path.join(workdir, LOCK_FILE)
    self.enabled = enabled
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None
    self.record = {'host': socket.gethostname(), 'pid': os.getpid(),
                   'start_ticks': _start_ticks(os.getpid()),
                   'since': datetime.datetime.now().astimezone().isoformat(timespec='seconds')}

  def _read(self) -> tuple[dict[str, Any] | None, float]:
    try:
      with open(self.path) as f:
        holder = json.load(f)
      return holder, time.time() - os.path.getmtime(self.path)
    except FileNotFoundError:
      return None, 0.0
    except (OSError, ValueError):   # half-written by a process killed mid-write: not a holder
      return {}, STALE_AFTER_S

  def acquire(self) -> None:
    if not self.enabled:
      return
    os.makedirs(os.path.dirname(self.path) or '.', exist_ok=True)
    holder, age = self._read()
    if holder and holder_alive(holder, age):
      raise RunInProgressError(
          f'{os.path.dirname(self.path)} is being trained by process {holder.get("pid")} on '
          f'{holder.get("host")} since {holder.get("since")} ({self.path}); stop that process or '
          'wait for it to end, or train in another --workdir (a lock left by a process that '
          f'died is taken over: on another host once it is {STALE_AFTER_S:.0f} s old)')
    if holder is None:   # no lock: create it, unless another process just did (then check it)
      try:
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
      except FileExistsError:
        return self.acquire()
      with errors.writing(self.path, os.path.dirname(self.path) or '.'):
        try:
          with os.fdopen(fd, 'w') as f:
            json.dump(self.record, f)
        except OSError:   # a full disk: no empty lock left behind
          os.remove(self.path)
          raise
    else:
      logging.warning('run lock %s of process %s on %s (since %s) is stale: taken over',
                      self.path, holder.get('pid'), holder.get('host'), holder.get('since'))
      temporary = f'{self.path}.{os.getpid()}'
      with open(temporary, 'w') as f:
        json.dump(self.record, f)
      os.replace(temporary, self.path)
    self._thread = threading.Thread(target=self._beat, daemon=True, name='run-lock-heartbeat')
    self._thread.start()

  def _beat(self) -> None:
    while not self._stop.wait(HEARTBEAT_S):
      try:
        os.utime(self.path)
      except OSError:
        return

  def release(self) -> None:
    if not self.enabled or self._thread is None:
      return
    self._stop.set()
    holder, _ = self._read()
    if (holder and holder.get('pid') == self.record['pid']
        and holder.get('host') == self.record['host']):
      os.remove(self.path)
    self._thread = None

  def __enter__(self) -> RunLock:
    self.acquire()
    return self

  def __exit__(self, *exc) -> None:
    self.release()
