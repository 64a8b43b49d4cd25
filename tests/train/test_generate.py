"""Generation from a trained character LM run: `load_run(DIR).generate` and `python -m
poolformers_jax.generate` on a tiny text8 run trained on 'abcd' repeated, which continues the
period; sampling reproducible by its seed, top_k=1 the greedy text; bad input refused."""
import json
import os
import subprocess
import sys
import zipfile

import enwik8
import pytest
from tiny_runs import REPO

from poolformers_jax import config as config_lib, load_run
from poolformers_jax.run import Run
from poolformers_jax.train import train_and_evaluate


@pytest.fixture(scope='module')
def lm_run(tmp_path_factory):
  """A 1-layer text8 LM after 120 steps on 'abcd' repeated."""
  root = tmp_path_factory.mktemp('generate')
  (root / 'data').mkdir()
  with zipfile.ZipFile(root / 'data' / 'text8.zip', 'w') as archive:
    archive.writestr('text8', 'abcd' * 600)
  config = config_lib.override(
      enwik8.get_config('transformer_l12,tiny,text8'),
      **{'data.data_dir': str(root / 'data'), 'data.split_sizes': (2000, 200, 200),
         'data.max_length': 16, 'model.num_layers': 1, 'model.emb_dim': 16,
         'model.mlp_dim': 32, 'model.num_heads': 2, 'model.dropout_rate': 0.0,
         'model.attention_dropout_rate': 0.0, 'batch_size': 8, 'eval_batch_size': 8,
         'num_train_steps': 120, 'eval_every_steps': 120, 'checkpoint_every_steps': 120,
         'log_every_steps': 120, 'progress_bar': False, 'final_test': False,
         'optimizer.learning_rate': 1e-2, 'optimizer.warmup_steps': 1})
  result = train_and_evaluate(config, str(root / 'run'))
  assert result.status == 'finished'
  return str(root / 'run')


def test_a_run_continues_its_period_greedy_top1_and_seeded(lm_run):
  run = load_run(lm_run, checkpoint='latest')
  assert run.generate('abc', 9, temperature=0) == 'dabcdabcd'
  assert run.generate('b', 6, temperature=1.0, top_k=1) == 'cdabcd'
  # Longer than the run's 16-symbol windows: sinusoidal positions are defined at any length.
  assert run.generate('abcd' * 5 + 'a', 7, temperature=0) == 'bcdabcd'
  sampled = run.generate('da', 12, temperature=1.5, seed=7)
  assert sampled == run.generate('da', 12, temperature=1.5, seed=7)
  assert len(sampled) == 12 and set(sampled) <= set('abcdefghijklmnopqrstuvwxyz ')
  with pytest.raises(ValueError, match=r"^text8: character 'A' is outside its vocabulary"):
    run.generate('ABC', 3)
  with pytest.raises(ValueError, match='^the prompt is empty'):
    run.generate('', 3)
  with pytest.raises(ValueError, match='^temperature=-1 is negative'):
    run.generate('ab', 3, temperature=-1)


def test_a_run_of_another_task_writes_no_text():
  config = config_lib.load_file('configs/lra_listops.py:transformer,tiny')
  run = Run(workdir='runs/listops', checkpoint='best', step=0, config=config, model=None,
            params=None)
  with pytest.raises(ValueError, match=r"^runs/listops trained on 'listops', whose runs write no "
                     'text: generate continues text with a character LM run'):
    run.generate('[MAX 2 3 ]', 4)


def test_the_program_prints_the_text_and_refuses_bad_input_in_a_line(lm_run, tmp_path):
  program = ['-m', 'poolformers_jax.generate', '--workdir', lm_run, '--checkpoint', 'latest']
  commands = {
      'greedy': [*program, '--prompt', 'cd', '--num_tokens', '6', '--temperature', '0'],
      'console': ['-m', 'poolformers_jax', 'generate', '--workdir', lm_run, '--checkpoint',
                  'latest', '--prompt', 'cd', '--num_tokens', '6', '--top_k', '1'],
      'empty prompt': [*program, '--prompt', '', '--num_tokens', '6'],
      'negative temperature': [*program, '--prompt', 'ab', '--temperature', '-2'],
      'no run': ['-m', 'poolformers_jax.generate', '--workdir', str(tmp_path / 'none'),
                 '--prompt', 'ab'],
  }
  proc = subprocess.run([sys.executable, os.path.join(REPO, 'tests', 'commands.py'), 'run'],
                        input=json.dumps(list(commands.values())), capture_output=True,
                        text=True, cwd=REPO, timeout=600,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = dict(zip(commands, json.loads(proc.stdout)))
  for name in ('greedy', 'console'):
    assert results[name]['code'] == 0, results[name]['stderr'][-3000:]
    assert results[name]['stdout'].splitlines()[-1] == 'abcdab'
  errors = {'empty prompt': 'error: the prompt is empty: give at least one symbol to continue',
            'negative temperature': 'error: temperature=-2.0 is negative',
            'no run': f'error: {tmp_path / "none"} not found: pass the workdir of a train.py run'}
  for name, line in errors.items():
    assert results[name]['code'] == 2, (name, results[name]['stderr'][-3000:])
    (said,) = results[name]['stderr'].splitlines()
    assert said.startswith(line), (name, said)
