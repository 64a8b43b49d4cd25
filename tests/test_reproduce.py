"""`python -m poolformers_jax.reproduce lra`: tables written, a finished family not retrained."""
import json
import logging
import os

import pytest

from poolformers_jax import reproduce


def _mtimes(root):
  return {os.path.join(d, n): os.stat(os.path.join(d, n)).st_mtime_ns
          for d, _, names in os.walk(root) for n in names}


@pytest.mark.slow
def test_reproduce_listops_two_families_and_resume(tmp_path, caplog):
  workdir = str(tmp_path / 'repro')
  argv = ['lra', '--task', 'listops', '--families', 'transformer,ponet', '--size', 'tiny',
          '--workdir', workdir, '--set', f'data.data_dir={tmp_path / "data"}',
          '--set', 'num_train_steps=2', '--set', 'eval_every_steps=2',
          '--set', 'checkpoint_every_steps=2', '--set', 'log_every_steps=1',
          '--set', 'progress_bar=False']
  results = reproduce.main(argv)
  runs = results['tasks']['listops']['families']
  assert sorted(runs) == ['ponet', 'transformer']
  for family, (run,) in runs.items():
    assert run['skipped'] is False and run['steps'] == 2 and run['seed'] == 0
    # The accuracy reported is the one the loop wrote for the best checkpoint on test.
    with open(os.path.join(workdir, 'listops', family, 'seed0', 'eval', 'test.json')) as f:
      test = json.load(f)
    assert run['test_accuracy'] == pytest.approx(100 * test['accuracy'])
    assert test['split'] == 'test' and test['checkpoint'] in ('best', 'latest')
    assert run['steps_per_second'] > 0 and run['peak_memory_bytes'] > 0
  with open(os.path.join(workdir, 'results.json')) as f:
    saved = json.load(f)
  assert saved['tasks']['listops']['families']['ponet'][0]['test_accuracy'] == pytest.approx(
      runs['ponet'][0]['test_accuracy'])
  with open(os.path.join(workdir, 'results.md')) as f:
    table = f.read()
  # The title says the run is not the plain setting: the overrides are listed.
  assert table.startswith('# LRA results (tiny setting with overrides: ')
  assert 'num_train_steps=2' in table.splitlines()[0]
  # One row per family, with the paper's number from the one table in reproduce.PAPER.
  assert '| listops | ponet | ' in table and '37.80 (PoNet)' in table
  assert '36.37 (LRA) / 37.10 (Nystromformer setting)' in table

  # Second call: ponet is finished and must not be retrained; a new family is trained.
  before = _mtimes(os.path.join(workdir, 'listops', 'ponet'))
  caplog.set_level(logging.INFO, logger='poolformers_jax.reproduce')
  again = reproduce.main(argv[:4] + ['ponet'] + argv[5:])
  assert _mtimes(os.path.join(workdir, 'listops', 'ponet')) == before
  assert again['tasks']['listops']['families']['ponet'][0]['skipped'] is True
  assert any('not retrained' in r.getMessage() for r in caplog.records)


def test_reproduce_reports_missing_data(tmp_path):
  results = reproduce.reproduce_lra(
      ['retrieval'], ['ponet'], str(tmp_path / 'repro'), size='tiny',
      overrides=[f'data.tsv_dir={tmp_path / "nowhere"}'])
  missing = results['tasks']['retrieval']['missing']
  assert 'new_aan_pairs.train.tsv' in missing and 'tsv_dir' in missing and '\n' not in missing
  with open(tmp_path / 'repro' / 'results.md') as f:
    assert '| retrieval | all | data missing:' in f.read()
  assert not os.path.exists(tmp_path / 'repro' / 'retrieval')


def test_paper_numbers_are_one_table():
  assert reproduce.paper_text('listops', 'adamra') == '40.40 (AdaMRA)'
  assert reproduce.paper_text('listops', 'msac') == 'not reported'
  assert set(reproduce.PAPER) == set(reproduce.TASKS)
