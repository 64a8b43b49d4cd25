"""The CPU side of `bash benchmarks/gpu_run.sh listops` (the ListOps column on one GPU, resumable
in calls of at most ten minutes): a call trains the unfinished families and packs the run
directories; the next call, given that pack, restores them, skips what finished and adds the
rest; the column lists every family with its test accuracy. Tiny sizes, this machine's python."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _call(tmp_path, name, families, state=None, heldout=True):
  out, runs = tmp_path / name, tmp_path / f'{name}_runs'
  env = dict(os.environ, OUT=str(out), LISTOPS_RUNS=str(runs), LISTOPS_FAMILIES=families,
             LISTOPS_HELDOUT='1' if heldout else '0',
             LISTOPS_SIZE='tiny', LISTOPS_INSTALL='0', PYTHON=sys.executable,
             LISTOPS_STATE=str(state or tmp_path / 'none'), JAX_PLATFORMS='cpu',
             LISTOPS_ARGS=f'--config.data.data_dir={tmp_path / "data"}',
             LISTOPS_HELDOUT_ARGS='--min_tokens 10 --max_tokens 40 --exclude_num_train 256')
  proc = subprocess.run(['bash', 'benchmarks/gpu_run.sh', 'listops'], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr
  return out, proc.stdout


def _member(out, path):
  for tar_path in sorted(out.glob('listops_*.tar')):
    with tarfile.open(tar_path) as pack:
      if path in pack.getnames():
        return pack.extractfile(path).read()
  raise KeyError(path)


def _test_accuracy(out, family):
  return json.loads(_member(out, f'{family}/eval/test.json'))['accuracy']


def _log(out, family):
  return _member(out, f'{family}/train.log').decode()


def test_listops_column_resumes_across_calls_from_its_pack(tmp_path):
  first, column = _call(tmp_path, 'call1', 'linear')
  assert sorted(p.name for p in first.iterdir()) == ['listops.md', 'listops_0.tar']
  linear = _test_accuracy(first, 'linear')
  assert '| linear | 20 |' in column and f'{100 * linear:.2f} |' in column
  heldout = json.loads(_member(first, 'linear/heldout.json'))     # best checkpoint, seed-1 trees
  assert heldout['step'] == json.loads(_member(first, 'linear/eval/test.json'))['step']
  assert heldout['count'] == 2000 and heldout['data_changes']['data.source'] == 'tsv'
  assert f'{100 * linear:.2f} | {100 * heldout["accuracy"]:.2f} |' in column
  with tarfile.open(first / 'listops_0.tar') as pack:
    names = pack.getnames()
  assert not any('tensorboard' in n for n in names)          # the pack carries no logs of TB
  assert any(n.startswith('linear/best/') for n in names)    # finished: the best checkpoint,
  assert not any(n.startswith('linear/checkpoints/') for n in names)   # not the resume ones
  first_log = _log(first, 'linear')
  assert first_log
  # Config words name a run (directory 'ponet-reference'); it trains beside nothing finished.
  # (the held-out evaluation is the first call's to test: skipped here, to keep the test short)
  second, column = _call(tmp_path, 'call2', 'linear ponet,reference', state=first, heldout=False)
  assert _log(second, 'linear') == first_log                # finished: not trained again
  run_config = json.loads(_member(second, 'ponet-reference/config.json'))
  assert run_config['model']['mixer'] == 'ponet' and run_config['param_init'] == 'torch'
  assert _test_accuracy(second, 'linear') == linear         # restored from the first pack
  ponet = _test_accuracy(second, 'ponet-reference')
  rows = [line for line in column.splitlines() if line.startswith('| linear') or
          line.startswith('| ponet,reference')]
  assert len(rows) == 2 and f'{100 * ponet:.2f} |' in rows[1]


def test_pack_splits_runs_under_the_limit_and_keeps_resume_checkpoints_of_unfinished(tmp_path):
  sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
  import listops_column   # pylint: disable=g-import-not-at-top
  runs = tmp_path / 'runs'
  for name, finished in (('a', True), ('b-reference', False)):
    for sub in ('best', 'checkpoints', 'averaged', 'tensorboard'):
      (runs / name / sub).mkdir(parents=True)
      (runs / name / sub / 'blob').write_bytes(b'x' * 40_000)
    if finished:
      (runs / name / 'eval').mkdir()
      (runs / name / 'eval' / 'test.json').write_text('{"accuracy": 0.5}')
  paths = listops_column.pack(str(runs), ['a', 'b,reference', 'missing'], str(tmp_path / 'out'),
                              limit=150_000)
  assert [os.path.basename(p) for p in paths] == ['listops_0.tar', 'listops_1.tar']
  names = [sorted(tarfile.open(p).getnames()) for p in paths]
  assert names[0] == ['a/best/blob', 'a/eval/test.json']
  assert names[1] == ['b-reference/averaged/blob', 'b-reference/best/blob',
                      'b-reference/checkpoints/blob']
  with pytest.raises(ValueError, match='b-reference needs'):
    listops_column.pack(str(runs), ['b,reference'], str(tmp_path / 'out2'), limit=100_000)
