"""One writer per run directory (trainer/run_lock.py): a second train.py on a live run's workdir is
refused in one line before it compiles; a lock whose process died does not block the resume."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from tiny_runs import REPO, tiny_overrides

from poolformers_jax.trainer import run_lock


def _train(workdir, data_dir, steps, **popen):
  overrides = [f'--config.{k}={v}' for k, v in tiny_overrides(
      data_dir, num_devices=1, num_train_steps=steps, checkpoint_every_steps=5,
      eval_every_steps=10_000, log_every_steps=5).items()]
  return subprocess.Popen(
      [sys.executable, 'train.py', '--config', 'configs/lra_listops.py:tiny', '--workdir',
       str(workdir), *overrides], cwd=REPO, text=True, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, env={**os.environ, 'JAX_PLATFORMS': 'cpu'}, **popen)


def _wait_for(predicate, timeout=240):
  deadline = time.time() + timeout
  while not predicate():
    assert time.time() < deadline, 'timed out'
    time.sleep(0.5)


def test_second_writer_is_refused_and_a_dead_writers_lock_does_not_block_resume(tmp_path, data_dir):
  workdir = tmp_path / 'run'
  lock = workdir / run_lock.LOCK_FILE
  first = _train(workdir, data_dir, steps=1_000_000)
  try:
    # The first run holds the lock from before compiling; wait until it has a checkpoint.
    _wait_for(lambda: (workdir / 'checkpoints').is_dir() and any(
        n.isdigit() for n in os.listdir(workdir / 'checkpoints')))
    holder = json.loads(lock.read_text())
    assert holder['pid'] == first.pid and holder['host'] == socket.gethostname()
    second = _train(workdir, data_dir, steps=1_000_000)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 2
    errors = [line for line in err.splitlines() if line.startswith('error:')]
    assert len(errors) == 1 and f'is being trained by process {first.pid} on ' in errors[0], err
    assert holder['since'] in errors[0] and 'Traceback' not in err
    assert 'compiled' not in err   # refused before the step was compiled
    assert first.poll() is None    # the first run trains on
  finally:
    first.send_signal(signal.SIGKILL)   # dies without releasing its lock
    first.wait(timeout=60)
  assert json.loads(lock.read_text())['pid'] == first.pid
  # The dead process's lock is stale: the same command resumes from its checkpoint and finishes.
  steps = max(int(n) for n in os.listdir(workdir / 'checkpoints') if n.isdigit()) + 5
  again = _train(workdir, data_dir, steps=steps)
  _, err = again.communicate(timeout=300)
  assert again.returncode == 0, err[-2000:]
  assert 'is stale: taken over' in err and f'finished at step {steps}' in err
  assert not lock.exists()   # released at the end


def test_a_lock_from_another_host_is_stale_only_when_its_heartbeat_stops():
  other = {'host': 'another-host', 'pid': 1, 'start_ticks': '1', 'since': 'then'}
  assert run_lock.holder_alive(other, age_s=run_lock.HEARTBEAT_S)
  assert not run_lock.holder_alive(other, age_s=run_lock.STALE_AFTER_S + 1)
  # This host: a live pid with another start time is another program (a reused pid).
  me = {'host': socket.gethostname(), 'pid': os.getpid(), 'since': 'now'}
  assert run_lock.holder_alive({**me, 'start_ticks': run_lock._start_ticks(os.getpid())}, 1e9)
  assert not run_lock.holder_alive({**me, 'start_ticks': 'not-a-start-time'}, 0.0)


def test_the_lock_is_released_and_a_refusal_names_the_holder(tmp_path):
  with run_lock.RunLock(str(tmp_path)) as held:
    record = json.loads((tmp_path / run_lock.LOCK_FILE).read_text())
    assert record == held.record
    with pytest.raises(run_lock.RunInProgressError, match=f'process {os.getpid()} on'):
      run_lock.RunLock(str(tmp_path)).acquire()
  assert not (tmp_path / run_lock.LOCK_FILE).exists()
