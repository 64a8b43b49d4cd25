"""train_and_evaluate end to end on tiny generated ListOps: sharding, resume, exact eval, errors."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from tiny_runs import REPO, sigterm_at_step, tiny_config, tiny_overrides

from poolformers_jax import data
from poolformers_jax.eval import evaluate
from poolformers_jax.train import NonFiniteLossError, train_and_evaluate
from poolformers_jax.trainer.metrics import read_metrics


def _losses(workdir):
  return np.array([r['loss'] for r in read_metrics(workdir, 'train')])


def _params(result):
  return jax.tree.map(np.asarray, jax.device_get(result.state.params))


@pytest.fixture(scope='module')
def trained(data_dir, tmp_path_factory):
  """One 4-step run on all 8 devices, shared by the eval and sharding tests."""
  workdir = str(tmp_path_factory.mktemp('run8'))
  config = tiny_config(data_dir, num_train_steps=4, eval_every_steps=2, checkpoint_every_steps=2)
  return config, workdir, train_and_evaluate(config, workdir)


def test_run_writes_config_metrics_checkpoints_and_test(trained):
  config, workdir, result = trained
  assert result.status == 'finished' and result.step == 4
  assert json.load(open(os.path.join(workdir, 'config.json')))['model']['vocab_size'] == 18
  assert [r['step'] for r in read_metrics(workdir, 'train')] == [1, 2, 3, 4]
  assert [r['step'] for r in read_metrics(workdir, 'validation')] == [2, 4]
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']
  test = json.load(open(os.path.join(workdir, 'eval', 'test.json')))
  assert test['count'] == 20 and test == result.test
  assert any(f.startswith('events') for f in os.listdir(os.path.join(workdir, 'tensorboard')))


def test_sharded_losses_equal_single_device(trained, data_dir, tmp_path):
  config, workdir8, result8 = trained
  single = tiny_config(data_dir, num_train_steps=4, eval_every_steps=2, checkpoint_every_steps=2,
                       num_devices=1)
  result1 = train_and_evaluate(single, str(tmp_path))
  np.testing.assert_allclose(_losses(str(tmp_path)), _losses(workdir8), rtol=1e-5)
  # Adam divides by sqrt(v): near-zero gradients turn float32 reduction-order noise into
  # ~1e-5 parameter differences (lr 3e-3), so parameters are compared at that scale.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4),
               _params(result1), _params(result8))
  assert result1.validation == pytest.approx(result8.validation, rel=1e-5)


def test_eval_is_exact_for_any_batch_size_and_restores_onto_fewer_devices(trained):
  config, workdir, result = trained
  # 20 test examples: batches of 8 leave a padded last batch, batches of 24 one padded batch.
  by8 = evaluate(config, workdir, checkpoint='latest', split='test', batch_size=8)
  by24 = evaluate(config, workdir, checkpoint='latest', split='test', batch_size=24)
  assert by8['count'] == by24['count'] == 20
  assert by8['accuracy'] == by24['accuracy']
  assert by8['loss'] == pytest.approx(by24['loss'], rel=1e-6)
  # The checkpoint was written from 8 devices; restore it onto 1 device.
  from poolformers_jax import config as config_lib
  one = evaluate(config_lib.override(config, num_devices=1), workdir, checkpoint='4',
                 split='test', batch_size=8)
  assert one['accuracy'] == by8['accuracy'] and one['step'] == 4
  assert one['loss'] == pytest.approx(by8['loss'], rel=1e-6)
  assert json.load(open(os.path.join(workdir, 'eval', 'test.json')))['step'] == 4


def test_eval_on_other_data_keeps_the_runs_own_record(trained):
  config, workdir, result = trained
  own_path = os.path.join(workdir, 'eval', 'test.json')
  own = json.load(open(own_path))
  from poolformers_jax import config as config_lib
  other = evaluate(config_lib.override(config, **{'data.generator.seed': 1}), workdir,
                   checkpoint='latest', split='test')
  assert json.load(open(own_path)) == own   # the run's own test record is untouched
  assert other['data_changes'] == {'data.generator.seed': 1}
  (name,) = [f for f in os.listdir(os.path.join(workdir, 'eval')) if f.startswith('test.data-')]
  assert json.load(open(os.path.join(workdir, 'eval', name))) == other
  assert other['count'] == 20 and other['loss'] != pytest.approx(own['loss'], rel=1e-6)


def test_eval_py_prints_one_json_line_and_writes_the_split_file(trained, data_dir):
  config, workdir, result = trained
  overrides = [f'--config.{k}={v}' for k, v in tiny_overrides(data_dir).items()]
  proc = subprocess.run(
      [sys.executable, 'eval.py', '--config', 'configs/lra_listops.py:tiny', '--workdir',
       workdir, '--checkpoint', 'best', '--split', 'validation', *overrides],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env={**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=2'})
  assert proc.returncode == 0, proc.stderr[-2000:]
  (line,) = proc.stdout.strip().splitlines()
  printed = json.loads(line)
  assert printed == json.load(open(os.path.join(workdir, 'eval', 'validation.json')))
  # The best checkpoint is the step with the highest validation accuracy of the run.
  history = read_metrics(workdir, 'validation')
  top = max(r['accuracy'] for r in history)
  (best,) = [r for r in history if r['step'] == printed['step']]
  assert printed['accuracy'] == best['accuracy'] == top
  assert printed['loss'] == pytest.approx(best['loss'], rel=1e-5)


def test_sigterm_then_resume_matches_uninterrupted(data_dir, tmp_path):
  config = tiny_config(data_dir, num_train_steps=5, eval_every_steps=5, checkpoint_every_steps=5)
  straight = train_and_evaluate(config, str(tmp_path / 'straight'))

  interrupted = str(tmp_path / 'interrupted')
  with sigterm_at_step(2):
    first = train_and_evaluate(config, interrupted)
  assert first.status == 'preempted' and first.step == 2
  assert os.listdir(os.path.join(interrupted, 'checkpoints')) == ['2']
  second = train_and_evaluate(config, interrupted)
  assert second.status == 'finished' and second.step == 5

  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
               _params(second), _params(straight))
  assert second.data_state == straight.data_state            # same position in the same order
  np.testing.assert_array_equal(_losses(interrupted), _losses(str(tmp_path / 'straight')))


def test_non_finite_loss_stops_naming_the_step_and_no_unconfirmed_checkpoint(data_dir, tmp_path):
  """lr 1e30 from the first step: step 1 is finite but exploded, step 2 NaN. Checkpoint 1 is not
  confirmed by a finite step after it: moved aside, and the line says no good checkpoint is
  kept (the sane / exploded / NaN case: test_robust.py)."""
  config = tiny_config(data_dir, num_train_steps=6, checkpoint_every_steps=1, eval_every_steps=100,
                       **{'optimizer.learning_rate': 1e30, 'optimizer.warmup_steps': 0,
                          'optimizer.schedule': 'constant'})
  with pytest.raises(NonFiniteLossError, match=r'training loss is nan at step (\d+)') as error:
    train_and_evaluate(config, str(tmp_path))
  bad_step = int(error.value.args[0].split('at step ')[1].split(':')[0])
  assert bad_step == 2 and os.listdir(tmp_path / 'checkpoints') == []
  assert os.listdir(tmp_path / 'rejected') == ['diverged-checkpoints-1']
  assert ('no good checkpoint is kept (checkpoint 1, saved right before the step that diverged, '
          'is not confirmed by a finite step after it') in str(error.value)


def test_progress_bar_counts_the_steps_whose_results_were_fetched(data_dir, tmp_path,
                                                                  monkeypatch):
  """Steps are dispatched ahead of the device; the bar moves only where the loop has fetched a
  step's results (log steps 3 and 6, validation / checkpoint 5, the stop at 4, the end 7), to
  that step, with the loss logged there; a resumed run's bar starts at its checkpoint."""
  import io

  import tqdm.auto
  shown = []   # (bar position, postfix) after every change of position

  class Recording(tqdm.auto.tqdm):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, file=io.StringIO(), **kwargs)
      shown.append((self.n, 'start'))

    def update(self, n=1):
      super().update(n)
      shown.append((self.n, self.postfix or ''))
  monkeypatch.setattr(tqdm.auto, 'tqdm', Recording)
  config = tiny_config(data_dir, num_train_steps=7, log_every_steps=3, eval_every_steps=5,
                       checkpoint_every_steps=5, num_devices=1, progress_bar=True)
  with sigterm_at_step(4):
    assert train_and_evaluate(config, str(tmp_path)).status == 'preempted'
  assert train_and_evaluate(config, str(tmp_path)).status == 'finished'
  loss = {r['step']: f"loss={r['loss']:.4g}" for r in read_metrics(str(tmp_path), 'train')}
  assert sorted(loss) == [3, 6, 7]
  assert shown == [(0, 'start'), (3, loss[3]), (4, loss[3]),
                   (4, 'start'), (5, ''), (6, loss[6]), (7, loss[7])]


def test_missing_dataset_fails_before_compiling_with_the_path(data_dir, tmp_path):
  missing = str(tmp_path / 'nowhere')
  config = tiny_config(data_dir, **{'data.source': 'tsv', 'data.tsv_dir': missing})
  with pytest.raises(data.DataNotFoundError, match=missing):
    train_and_evaluate(config, str(tmp_path / 'run'))
  assert not os.path.exists(tmp_path / 'run' / 'checkpoints')


def test_bf16_compute_with_accumulation_smoothing_and_clipping(data_dir, tmp_path):
  config = tiny_config(data_dir, num_train_steps=4, eval_every_steps=4, checkpoint_every_steps=4,
                       label_smoothing=0.1, **{'model.dtype': 'bfloat16',
                                               'optimizer.grad_accum_steps': 2,
                                               'optimizer.grad_clip_norm': 1.0,
                                               'optimizer.weight_decay': 0.05,
                                               'optimizer.schedule': 'cosine'})
  result = train_and_evaluate(config, str(tmp_path))
  params = jax.tree.leaves(jax.device_get(result.state.params))
  assert all(p.dtype == np.float32 and np.isfinite(p).all() for p in params)
  train = read_metrics(str(tmp_path), 'train')
  # MultiSteps updates every 2nd micro-batch, so the cosine schedule runs over 4 // 2 = 2
  # updates (warmup 1 // 2 = 0): 3e-3 for updates 0 and 3e-3 * (1 + cos(pi / 2)) / 2 for 1.
  lrs = [r['learning_rate'] for r in train]
  np.testing.assert_allclose(lrs, [3e-3, 3e-3, 1.5e-3, 1.5e-3], rtol=1e-5)
  assert np.isfinite(result.test['loss'])
