"""Two processes joined by jax.distributed over loopback (gloo CPU collectives), parameters split
between them (fsdp 2) == one data-parallel process; one of them lost (kill -9) ends the other
in one line naming it, and the two started again resume exactly."""
import json
import os
import re
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
from tiny_runs import tiny_config

from poolformers_jax import errors
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import checkpoint as checkpoint_lib, utilisation
from poolformers_jax.trainer.metrics import read_metrics

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _losses(workdir):
  return np.array([r['loss'] for r in read_metrics(workdir, 'train')])


@pytest.mark.slow
def test_two_processes_match_one_process(data_dir, tmp_path):
  # Reference: one process on 2 devices; the data iterator gives it the same global batches.
  config = tiny_config(data_dir, num_train_steps=3, eval_every_steps=3, checkpoint_every_steps=3,
                       num_devices=2)
  single = train_and_evaluate(config, str(tmp_path / 'single'))

  port = _free_port()
  workdir = str(tmp_path / 'multi')
  procs = []
  for pid in range(2):
    env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1',
           'JAX_PLATFORMS': 'cpu', 'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}',
           'JAX_NUM_PROCESSES': '2', 'JAX_PROCESS_ID': str(pid)}
    procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, 'multiprocess_worker.py'),
                                   data_dir, workdir], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True))
  outputs = []
  try:
    for proc in procs:
      out, err = proc.communicate(timeout=600)
      assert proc.returncode == 0, err[-3000:]
      outputs.append(json.loads(out.strip().splitlines()[-1]))
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
  assert [o['process_index'] for o in outputs] == [0, 1]
  assert all(o['process_count'] == 2 and o['devices'] == 2 for o in outputs)
  np.testing.assert_allclose(_losses(workdir), _losses(str(tmp_path / 'single')), rtol=1e-5)
  assert len(_losses(workdir)) == 3
  for o in outputs:   # every example evaluated once across the two processes
    assert o['validation']['count'] == 20 and o['test']['count'] == 20
    assert o['validation'] == pytest.approx(single.validation, rel=1e-5)
    assert o['test']['accuracy'] == single.test['accuracy']
  # Each process saved its own data iterator position beside the shared model checkpoint.
  saved = set(os.listdir(os.path.join(workdir, 'checkpoints', '3', 'data')))
  assert {'process_0-of-2.json', 'process_1-of-2.json'} <= saved


def _train_program(data_dir, workdir, die_at=None):
  """train.py in two processes (multiprocess_worker.py `program`); `die_at` {process: step}: that
  process kills itself (SIGKILL) as it reads that step's batch. [(exit code, stderr)] per
  process; each must end within the timeout (a hang fails the test, it does not stall it)."""
  port, die_at = _free_port(), die_at or {}
  procs = []
  for pid in range(2):
    env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1',
           'JAX_PLATFORMS': 'cpu', 'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}',
           'JAX_NUM_PROCESSES': '2', 'JAX_PROCESS_ID': str(pid)}
    extra = [str(die_at[pid])] if pid in die_at else []
    procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, 'multiprocess_worker.py'),
                                   'program', data_dir, workdir, *extra], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
  try:
    errs = [proc.communicate(timeout=600)[1] for proc in procs]
    return [(proc.returncode, err) for proc, err in zip(procs, errs)]
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()


def _records(workdir):
  return [{k: v for k, v in r.items() if k not in utilisation.MACHINE_KEYS}
          for r in read_metrics(workdir)]


@pytest.mark.slow
def test_a_lost_process_ends_the_other_in_one_line_and_both_resume_exactly(data_dir, tmp_path):
  """Process 1 killed (SIGKILL) after checkpoint 2: process 0's next collective fails, it names
  process 1 and checkpoint 2 in one line and exits with code 3, instead of waiting for it (the
  bound: sharding.HEARTBEAT_TIMEOUT_S, after which jax would end it without a word). Both
  started again resume from step 2, to the same records as a run never interrupted."""
  reference = str(tmp_path / 'reference')
  assert [code for code, _ in _train_program(data_dir, reference)] == [0, 0]
  workdir = str(tmp_path / 'run')
  (survivor, survivor_err), (lost, _) = _train_program(data_dir, workdir, die_at={1: 4})
  assert lost == -signal.SIGKILL
  assert survivor == errors.MACHINE_FAULT_EXIT, survivor_err[-3000:]
  line = survivor_err.splitlines()[-1]
  assert re.fullmatch(
      re.escape('error: process 1 of 2 is lost (killed, crashed, or its host is gone): process 0 '
                f'stops too instead of waiting for it; checkpoint 2 is intact ({workdir}/'
                'checkpoints/2, ') + r'[0-9.]+ KiB' + re.escape('): the same command resumes '
                'from step 2 when every process is started again'), line), line
  assert checkpoint_lib.finished_steps(workdir) == [2]

  assert [code for code, _ in _train_program(data_dir, workdir)] == [0, 0]
  assert _records(workdir) == _records(reference)   # losses, validation and test, exactly
  assert [r['step'] for r in read_metrics(workdir, 'train')] == [1, 2, 3, 4]
