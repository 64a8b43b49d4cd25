"""`python -m poolformers_jax.reproduce lra`: tables written, a finished family not retrained."""
import glob
import json
import logging
import os
import re

import pytest

from poolformers_jax import reproduce
from poolformers_jax.config import lra as lra_configs
from poolformers_jax.experiments import lra, papers, plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
  results = reproduce.command(argv)
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
  # One row per family, with the paper's number from the one table in papers.PAPER.
  assert '| listops | ponet | ' in table and '37.80 (PoNet)' in table
  assert '36.37 (LRA) / 37.10 (Nystromformer setting)' in table

  # Second call: ponet is finished and must not be retrained; a new family is trained.
  before = _mtimes(os.path.join(workdir, 'listops', 'ponet'))
  caplog.set_level(logging.INFO, logger='poolformers_jax.reproduce')
  again = reproduce.command(argv[:4] + ['ponet'] + argv[5:])
  assert _mtimes(os.path.join(workdir, 'listops', 'ponet')) == before
  assert again['tasks']['listops']['families']['ponet'][0]['skipped'] is True
  assert any('not retrained' in r.getMessage() for r in caplog.records)


def test_reproduce_reports_missing_data(tmp_path):
  results = lra.reproduce_lra(
      ['retrieval'], ['ponet'], str(tmp_path / 'repro'), size='tiny',
      overrides=[f'data.tsv_dir={tmp_path / "nowhere"}'])
  missing = results['tasks']['retrieval']['missing']
  assert 'new_aan_pairs.train.tsv' in missing and 'tsv_dir' in missing and '\n' not in missing
  with open(tmp_path / 'repro' / 'results.md') as f:
    assert '| retrieval | all | data missing:' in f.read()
  assert not os.path.exists(tmp_path / 'repro' / 'retrieval')
  # Data made on first use (its dataset declares `generated`) is reported present, not made here.
  assert lra.data_status('pathfinder', 'tiny', ['data.format=generated',
                                                      f'data.data_dir={tmp_path / "gen"}']) is None
  assert not os.path.exists(tmp_path / 'gen')


def test_paper_numbers_are_one_table():
  assert papers.paper_text('listops', 'adamra') == '40.40 (AdaMRA)'
  assert papers.paper_text('listops', 'linear') == '37.35 (AdaMRA T1) / 16.13 (LRA)'
  assert papers.paper_text('listops', 'msac') == 'not reported'
  assert set(papers.PAPER) == set(lra.TASKS)


def _read(path):
  with open(os.path.join(ROOT, path), encoding='utf-8') as f:
    return f.read()


def _figures(text):
  return re.findall(r'\d+\.\d\d', text)


def test_papers_numbers_live_in_papers_json_alone():
  """The papers' figures are written once (poolformers_jax/experiments/papers.json, what
  papers.PAPER / GLUE_PAPER read); docs/papers/lra.md's table quotes them exactly; no config
  file or package module writes one again."""
  with open(papers.PATH, encoding='utf-8') as f:
    figures = set(_figures(f.read()))
  assert {f'{v:.2f}' for families in papers.PAPER.values() for numbers in families.values()
          for v, _ in numbers} | {f'{v:.2f}' for pair in papers.GLUE_PAPER.values()
                                  for numbers in pair for v in numbers} <= figures
  rows = {}
  for line in _read('docs/papers/lra.md').splitlines():
    match = re.match(r'\| `(\w+)` \(.*?\) \|(.*)\|$', line)
    if match:
      rows[match.group(1)] = [cell.strip() for cell in match.group(2).split('|')]
  assert rows == {family: [' · '.join(f'{value:.2f}' for value, _ in papers.PAPER[task][family])
                           for task in lra.TASKS]
                  for family in papers.PAPER['listops']}
  sources = glob.glob(os.path.join(ROOT, 'configs', '*.py')) + glob.glob(
      os.path.join(ROOT, 'poolformers_jax', '**', '*.py'), recursive=True)
  quoted = {os.path.relpath(p, ROOT): set(_figures(_read(p))) & figures for p in sources}
  assert not {p: q for p, q in quoted.items() if q}, 'read them from papers.json'


def test_reproduce_trains_every_family_of_the_configs_but_the_reference_variants():
  assert lra.FAMILIES == ('transformer', 'linear', 'ponet', 'adamra', 'contextpool', 'msac')
  assert set(lra.FAMILIES) | set(lra.VARIANTS) == set(lra_configs.FAMILIES)
  assert lra.VARIANTS == ('linear_reference', 'adamra_eq8')


def test_wall_time_and_curves_count_every_invocation(tmp_path, monkeypatch):
  """A run stopped once and resumed reports the time of both invocations; curves.png is drawn
  from every run's validation records, one point per step."""
  import poolformers_jax.train as train
  from poolformers_jax.train import TrainResult
  clock = iter([100.0, 130.0, 500.0, 545.0])        # 30 s, stopped; then 45 s, finished
  calls = []

  def fake_train(config, workdir):
    calls.append(config.num_train_steps)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, 'metrics.jsonl'), 'a') as f:
      for step, acc in ([(100, 0.2)] if len(calls) == 1 else [(200, 0.3), (300, 0.35)]):
        f.write(json.dumps({'step': step, 'split': 'validation', 'accuracy': acc}) + '\n')
        f.write(json.dumps({'step': step, 'split': 'train', 'steps_per_second': 2.0}) + '\n')
    if len(calls) == 1:
      return TrainResult(None, 100, 'preempted', None, None, None, None)
    return TrainResult(None, 300, 'finished', None, {'accuracy': 0.4}, None, None)

  monkeypatch.setattr(train, 'train_and_evaluate', fake_train)
  workdir = str(tmp_path / 'repro')
  with pytest.raises(reproduce.RunStopped, match='stopped at step 100'):
    lra.reproduce_lra(['listops'], ['ponet'], workdir, size='tiny', clock=lambda: next(clock))
  results = lra.reproduce_lra(['listops'], ['ponet'], workdir, size='tiny',
                                    clock=lambda: next(clock))
  (run,) = results['tasks']['listops']['families']['ponet']
  assert run['wall_seconds'] == pytest.approx(75.0) and run['invocations'] == 2
  assert run['test_accuracy'] == pytest.approx(40.0) and run['steps_per_second'] == 2.0
  assert plots.validation_curves(results) == {
      'listops': {'ponet seed 0': ([100, 200, 300], [20.0, 30.0, 35.0])}}
  with open(os.path.join(workdir, 'curves.csv')) as f:
    assert f.read() == ('task,step,ponet seed 0\nlistops,100,20.00\nlistops,200,30.00\n'
                        'listops,300,35.00\n')
  with open(os.path.join(workdir, 'curves.png'), 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  with open(os.path.join(workdir, 'results.md')) as f:
    assert '| listops | ponet | 40.00 | 37.80 (PoNet) | 0 | 2.00 | 1.2 min |' in f.read()
