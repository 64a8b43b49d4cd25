"""The CPU side of `bash benchmarks/gpu_run.sh listops` (the ListOps column on one GPU, resumable
in calls of at most ten minutes): a call trains the unfinished families and packs the run
directories; the next call, given that pack, restores them, skips what finished and adds the
rest; the column lists every family with its test accuracy. Tiny sizes, this machine's python."""
import json
import os
import subprocess
import sys
import tarfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _call(tmp_path, name, families, state=None):
  out, runs = tmp_path / name, tmp_path / f'{name}_runs'
  env = dict(os.environ, OUT=str(out), LISTOPS_RUNS=str(runs), LISTOPS_FAMILIES=families,
             LISTOPS_SIZE='tiny', LISTOPS_INSTALL='0', PYTHON=sys.executable,
             LISTOPS_STATE=str(state or tmp_path / 'none'), JAX_PLATFORMS='cpu',
             LISTOPS_ARGS=f'--config.data.data_dir={tmp_path / "data"}')
  proc = subprocess.run(['bash', 'benchmarks/gpu_run.sh', 'listops'], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr
  return out, proc.stdout


def _test_accuracy(out, family):
  with tarfile.open(out / f'listops_{family}.tar') as pack:
    return json.load(pack.extractfile(f'{family}/eval/test.json'))['accuracy']


def _log(out, family):
  with tarfile.open(out / f'listops_{family}.tar') as pack:
    return pack.extractfile(f'{family}/train.log').read().decode()


def test_listops_column_resumes_across_calls_from_its_pack(tmp_path):
  first, column = _call(tmp_path, 'call1', 'linear')
  assert sorted(p.name for p in first.iterdir()) == ['listops.md', 'listops_linear.tar']
  linear = _test_accuracy(first, 'linear')
  assert f'| linear | 20 |' in column and f'{100 * linear:.2f} |' in column
  with tarfile.open(first / 'listops_linear.tar') as pack:
    names = pack.getnames()
  assert not any('tensorboard' in n for n in names)          # the pack carries no logs of TB
  first_log = _log(first, 'linear')
  assert first_log
  second, column = _call(tmp_path, 'call2', 'linear ponet', state=first)
  assert _log(second, 'linear') == first_log                # finished: not trained again
  assert _log(second, 'ponet')
  assert _test_accuracy(second, 'linear') == linear         # restored from the first pack
  ponet = _test_accuracy(second, 'ponet')
  rows = [line for line in column.splitlines() if line.startswith('| linear') or
          line.startswith('| ponet')]
  assert len(rows) == 2 and f'{100 * ponet:.2f} |' in rows[1]
