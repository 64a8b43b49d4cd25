"""Library calls change nothing process-wide (issue 54): importing every module of the package,
`config.load`, `train_and_evaluate`, `load_run(...).predict` and `evaluate` leave absl's flags,
jax's config and the multi-process state as they were. The programs (poolformers_jax/train.py, ...)
define their flags and start a multi-process run themselves; a library caller (a notebook on a
SLURM node, an application with its own `--config` flag) gets neither."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CODE = '''
import importlib, json, pkgutil, sys
sys.path.insert(0, {here!r})
from absl import flags
import jax
from tiny_runs import tiny_overrides   # sets the suite's compilation cache: before the snapshot
# The libraries the package imports define absl flags of their own (absl.logging, grain, chex's
# test flags): imported before the snapshot, so what is left is ours.
import chex, flax.linen, grain, optax, orbax.checkpoint, tensorflow_datasets

starts = []   # jax.distributed.initialize calls: on a SLURM node one would join the cluster
jax.distributed.initialize = lambda *args, **kwargs: starts.append(repr(args))


def state():
  from jax._src import distributed
  ours = [m for m in flags.FLAGS.flags_by_module_dict() if m.startswith('poolformers_jax')]
  return {{'flags': sorted(flags.FLAGS), 'ours': ours, 'parsed': flags.FLAGS.is_parsed(),
          'jax': {{k: repr(v) for k, v in jax.config.values.items()}},
          'distributed': [jax.distributed.is_initialized(), distributed.global_state.client is None,
                          distributed.global_state.service is None]}}


before = state()
import poolformers_jax
for info in pkgutil.walk_packages(poolformers_jax.__path__, 'poolformers_jax.'):
  importlib.import_module(info.name)   # the programs and the __main__ modules too
imported = state()
from poolformers_jax import config as config_lib, load_run
from poolformers_jax.eval import evaluate
from poolformers_jax.train import train_and_evaluate
config = config_lib.load('lra_listops:transformer,tiny', tiny_overrides({data_dir!r}))
result = train_and_evaluate(config, {workdir!r})
predicted = load_run({workdir!r}).predict(['[MAX 2 9 [MIN 4 7 ] 0 ]'])
metrics = evaluate(None, {workdir!r}, split='validation')
after = state()
print(json.dumps({{'before': before, 'imported': imported, 'after': after,
                  'status': result.status, 'predicted': [int(p) for p in predicted],
                  'evaluated': metrics['split'], 'starts': starts}}))
'''


def _changed(a: dict, b: dict) -> dict:
  return {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}


def test_imports_and_library_calls_leave_flags_jax_config_and_distributed_as_they_were(
    data_dir, tmp_path):
  code = CODE.format(here=HERE, data_dir=data_dir, workdir=str(tmp_path / 'run'))
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert (got['status'], got['evaluated']) == ('finished', 'validation')
  assert 0 <= got['predicted'][0] < 10
  assert got['starts'] == []                  # no multi-process start-up was even tried
  before = got['before']
  for when in ('imported', 'after'):
    now = got[when]
    assert sorted(set(now['flags']) - set(before['flags'])) == [], when   # no flag defined
    assert now['ours'] == [], when
    assert now['parsed'] == before['parsed'], when
    assert _changed(before['jax'], now['jax']) == {}, when                # no jax.config.update
    assert now['distributed'] == before['distributed'] == [False, True, True], when
