"""Two processes joined by jax.distributed over loopback (gloo CPU collectives), parameters split
between them (fsdp 2) == one data-parallel process."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tiny_runs import tiny_config
from poolformers_jax.train import train_and_evaluate
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
