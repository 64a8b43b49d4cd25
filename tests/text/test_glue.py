"""GLUE through the data layer and exact evaluation, on tfds.testing.mock_data with records we
choose: every official metric equals its hand computation on the model's predictions (last
batch padded), and the metric formulas themselves match values worked out by hand."""
import json
import os
import zlib

import glue
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from poolformers_jax import config as config_lib, data
from poolformers_jax.data import glue as glue_data
from poolformers_jax.eval import evaluate_state
from poolformers_jax.tasks import text as text_tasks
from poolformers_jax.trainer import setup as setup_lib
from poolformers_jax.trainer.metrics import read_metrics

WORDS = ['first', 'second', 'the', 'cat'] + [f'tp{t}w{j}' for t in range(6) for j in range(8)]


def _sentence(rng):
  return ' '.join(rng.choice(WORDS, size=int(rng.integers(2, 9))))


def _records(task, split, n=11):
  """n records of glue/<task> (n odd: the last eval batch of 4 is padded)."""
  rng = np.random.default_rng(zlib.crc32(f'{task}/{split}'.encode()))
  keys, num_classes = glue_data.TASKS[task]
  out = []
  for i in range(n):
    record = {k: _sentence(rng).encode() for k in keys}
    record['label'] = (np.float32(rng.uniform(0, 5)) if num_classes == 1
                       else np.int64(rng.integers(num_classes)))
    record['idx'] = np.int32(i)
    out.append(record)
  return out


def _evaluate(task, text_dir, tmp_path):
  config = config_lib.override(glue.get_config(f'{task},tiny'), **{
      'data.vocab_file': text_dir['vocab'], 'data.data_dir': str(tmp_path),
      'eval_batch_size': 4, 'batch_size': 4, 'num_devices': 1})
  records = {}

  def as_data_source(builder, split, **kwargs):
    del kwargs
    assert builder.builder_config.name == task
    return records.setdefault(split, _records(task, split))

  with tfds.testing.mock_data(as_data_source_fn=as_data_source):
    setup = setup_lib.make_setup(config)
    state = setup_lib.create_train_state(setup, jax.random.PRNGKey(1))
    # BERT's init (0.02) predicts one class everywhere: perturb every weight so the predictions
    # vary (the metrics are checked, not the model).
    leaves, tree = jax.tree.flatten(state.params)
    keys = jax.random.split(jax.random.PRNGKey(2), len(leaves))
    state = state.replace(params=jax.tree.unflatten(
        tree, [w + 0.5 * jax.random.normal(k, w.shape) for w, k in zip(leaves, keys)]))
    if setup.info.num_classes > 1:   # centre each class's logit on the validation inputs
      rows = _records(task, config.data.tfds_splits.validation)
      inputs = np.stack([glue_data.preprocess(r,
                                              data.settings(config.data))['inputs'] for r in rows])
      logits = np.asarray(setup.model.apply({'params': state.params}, jnp.asarray(inputs)))
      head = dict(state.params['classifier'])
      head['bias'] = head['bias'] - np.median(logits, axis=0)
      state = state.replace(params={**state.params, 'classifier': head})
    metrics = {split: evaluate_state(config, setup, state, split)
               for split in ('validation', 'test')}
  outputs = {}
  for split, tfds_split in (('validation', config.data.tfds_splits.validation),
                            ('test', config.data.tfds_splits.test)):
    rows = records[tfds_split]
    inputs = np.stack([glue_data.preprocess(r, data.settings(config.data))['inputs'] for r in rows])
    out = np.asarray(setup.model.apply({'params': state.params}, jnp.asarray(inputs)))
    outputs[split] = (out, np.asarray([r['label'] for r in rows]))
  return setup, metrics, outputs


def _binary_by_hand(predicted, labels):
  tp = np.sum((predicted == 1) & (labels == 1))
  tn = np.sum((predicted == 0) & (labels == 0))
  fp = np.sum((predicted == 1) & (labels == 0))
  fn = np.sum((predicted == 0) & (labels == 1))
  mcc_den = np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
  return {'accuracy': (tp + tn) / len(labels), 'f1': 2 * tp / (2 * tp + fp + fn),
          'matthews_corrcoef': (tp * tn - fp * fn) / mcc_den if mcc_den else 0.0}


@pytest.mark.parametrize('task', ['cola', 'mrpc'])
def test_binary_glue_metrics(task, text_dir, tmp_path):
  setup, metrics, outputs = _evaluate(task, text_dir, tmp_path)
  assert setup.info.task == 'text_classification' and setup.info.num_classes == 2
  logits, labels = outputs['validation']
  predicted = np.argmax(logits, -1)
  assert 0 < predicted.sum() < len(predicted), 'degenerate predictions test nothing'
  expected = _binary_by_hand(predicted, labels)
  got = metrics['validation']
  assert got['count'] == 11
  for key, value in expected.items():
    np.testing.assert_allclose(got[key], value, atol=1e-6, err_msg=key)
  np.testing.assert_allclose(got['accuracy_f1'], (expected['accuracy'] + expected['f1']) / 2,
                             atol=1e-6)


def test_mnli_matched_and_mismatched_splits(text_dir, tmp_path):
  """MNLI: validation reads validation_matched, test validation_mismatched (3 classes); the
  accuracy formula itself is the one checked on the binary tasks."""
  config = config_lib.override(glue.get_config('mnli,tiny'), **{
      'data.vocab_file': text_dir['vocab'], 'data.data_dir': str(tmp_path)})
  asked = []

  def as_data_source(builder, split, **kwargs):
    del kwargs
    asked.append((builder.builder_config.name, split))
    return _records('mnli', split, n=5 if split == 'validation_matched' else 7)

  with tfds.testing.mock_data(as_data_source_fn=as_data_source):
    info = data.get_dataset_info(data.settings(config.data))
    matched = glue_data.source(data.settings(config.data), 'validation')
    mismatched = glue_data.source(data.settings(config.data), 'test')
  assert info.task == 'text_classification' and info.num_classes == 3
  assert info.split_sizes == {'train': 7, 'validation': 5, 'test': 7}
  assert ('mnli', 'validation_matched') in asked and ('mnli', 'validation_mismatched') in asked
  ex = glue_data.preprocess(matched[0], data.settings(config.data))
  assert ex['inputs'][0] == 2 and (ex['inputs'] == 3).sum() == 2    # [CLS] premise [SEP] hyp [SEP]
  assert len(mismatched) == 7


def _ranks_no_ties(v):
  return np.argsort(np.argsort(v)).astype(np.float64)


def test_stsb_regression_pearson_spearman(text_dir, tmp_path):
  setup, metrics, outputs = _evaluate('stsb', text_dir, tmp_path)
  assert setup.info.task == 'regression' and setup.info.num_classes == 1
  predictions, labels = outputs['validation']
  predictions = predictions[:, 0]
  got = metrics['validation']
  np.testing.assert_allclose(got['loss'], np.mean((predictions - labels) ** 2), rtol=1e-5)
  np.testing.assert_allclose(got['pearson'], np.corrcoef(predictions, labels)[0, 1], atol=1e-5)
  np.testing.assert_allclose(got['spearman'], np.corrcoef(_ranks_no_ties(predictions),
                                                          _ranks_no_ties(labels))[0, 1], atol=1e-6)


def test_metric_formulas_by_hand():
  # Confusion [[5, 2], [1, 4]] (rows true, columns predicted): TP 4, TN 5, FP 2, FN 1.
  confusion = np.array([[5.0, 2.0], [1.0, 4.0]])
  out = text_tasks.confusion_summary({'loss': 0.0, 'count': 12.0, 'confusion': confusion})
  np.testing.assert_allclose(out['accuracy'], 9 / 12)
  np.testing.assert_allclose(out['f1'], 8 / 11)                            # 2TP / (2TP+FP+FN)
  np.testing.assert_allclose(out['matthews_corrcoef'], 18 / np.sqrt(6 * 5 * 7 * 6))
  np.testing.assert_allclose(out['macro_f1'], (8 / 11 + 10 / 13) / 2)      # class 0: 10/13
  # Three classes, all correct but one 0 -> 2: R_K = (c n - t.p) / sqrt((n^2 - p.p)(n^2 - t.t)).
  three = np.array([[1.0, 0, 1], [0, 2, 0], [0, 0, 2]])
  n, t, p = 6.0, np.array([2, 2, 2.0]), np.array([1, 2, 3.0])
  np.testing.assert_allclose(text_tasks.matthews_corrcoef(three),
                             (5 * n - t @ p) / np.sqrt((n * n - p @ p) * (n * n - t @ t)))
  # Spearman with a tie: ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4] -> 4.5 / sqrt(4.5 * 5).
  np.testing.assert_allclose(text_tasks.spearman([1, 2, 2, 3], [1, 3, 2, 4]), 4.5 / np.sqrt(22.5))


def test_glue_steps_follow_epochs_at_the_chosen_batch_size():
  """4 epochs at every batch size of the grid (the steps are computed when the config is read,
  so an override of batch_size changes them); an explicit num_train_steps wins."""
  config = glue.get_config('mrpc')
  steps = {b: config_lib.override(config, batch_size=b).num_train_steps
           for b in (8, 16, 32, 64, 128)}
  assert steps == {b: -(-4 * 3668 // b) for b in steps} and steps[8] == 1834
  assert config_lib.override(config, num_epochs=2).num_train_steps == 230
  assert config_lib.override(config, batch_size=8, num_train_steps=5).num_train_steps == 5
  assert config.copy_and_resolve_references().num_train_steps == 459


@pytest.mark.slow
def test_glue_sweep_end_to_end_best_on_dev(text_dir, tmp_path):
  """`python -m poolformers_jax.reproduce glue` on mock MRPC and MNLI with a 1 x 2 grid: every
  run trained, the best on dev chosen, one table with the slides' numbers beside ours."""
  from poolformers_jax import reproduce
  records = {}

  def as_data_source(builder, split, **kwargs):
    del kwargs
    task = builder.builder_config.name
    return records.setdefault((task, split), _records(task, split, n=16))

  workdir = str(tmp_path / 'sweep')
  argv = ['glue', '--task', 'mrpc,mnli', '--size', 'tiny', '--workdir', workdir,
          '--batch_sizes', '4', '--learning_rates', '1e-3,0.05',
          '--set', f'data.vocab_file={text_dir["vocab"]}', '--set', f'data.data_dir={tmp_path}',
          '--set', 'num_train_steps=3', '--set', 'eval_every_steps=1',
          '--set', 'checkpoint_every_steps=1', '--set', 'progress_bar=False',
          '--set', 'num_devices=1', '--set', 'model.dropout_rate=0.0']
  with tfds.testing.mock_data(as_data_source_fn=as_data_source):
    results = reproduce.command(argv)
  with open(os.path.join(workdir, 'glue_results.md')) as f:
    table = f.read()
  assert table.startswith('# GLUE dev results (tiny setting with overrides: ')
  for task, metric in (('mrpc', 'accuracy_f1'), ('mnli', 'accuracy')):
    entry = results['families']['ponet'][task]
    runs = entry['runs']
    assert [(r['batch_size'], r['learning_rate']) for r in runs] == [(4, 1e-3), (4, 0.05)]
    dev = []
    for run in runs:   # a run's dev score: its best validation evaluation (from the loop's log)
      evaluations = read_metrics(run['workdir'], 'validation')
      assert run['steps'] == 3 and len(evaluations) == 3 and run['metric'] == metric
      dev.append(100 * max(r[metric] for r in evaluations))
      assert run['dev'] == pytest.approx(dev[-1])
    best = entry['best']
    assert best['dev'] == max(dev) and best is runs[int(np.argmax(dev))]
    row = next(line for line in table.splitlines() if line.startswith(f'| {task} |'))
    cells = [c.strip() for c in row.strip('|').split('|')]
    paper = '76.99/77.21' if task == 'mnli' else '81.76'
    assert cells[:3] == [task, metric, 'ponet'] and cells[4:] == [
        '4', f'{best["learning_rate"]:g}', paper, '81.35/80.98' if task == 'mnli' else '86.66', '2']
    if task == 'mnli':   # matched = dev, mismatched = the same best checkpoint on test
      with open(os.path.join(best['workdir'], 'eval', 'test.json')) as f:
        mismatched = 100 * json.load(f)['accuracy']
      assert cells[3] == f'{best["dev"]:.2f}/{mismatched:.2f}'
      assert ('mnli', 'validation_mismatched') in records
    else:
      assert cells[3] == f'{best["dev"]:.2f}'
  assert not any(line.startswith('| average') for line in table.splitlines())   # 2 of 8 tasks


def test_load_run_encodes_sentences_and_pairs_as_glue_does(text_dir):
  """Run.encode of raw text (a pair for MRPC, one sentence for CoLA) is the GLUE example of the
  same record: WordPiece ids, [CLS] a [SEP] b [SEP], token types, the run's max_length."""
  import types

  from poolformers_jax.run import Run
  from poolformers_jax.tasks import get_task
  for task, arity in (('mrpc', 2), ('cola', 1)):
    config = config_lib.override(glue.get_config(f'{task},tiny'),
                                   **{'data.vocab_file': text_dir['vocab']})
    settings = data.settings(config.data)
    run = Run(workdir='w', checkpoint='best', step=0, config=config, model=None, params=None,
              setup=types.SimpleNamespace(info=types.SimpleNamespace(task='text_classification'),
                                           task=get_task('text_classification'), data=settings))
    rows = _records(task, 'validation', n=3)
    keys, _ = glue_data.TASKS[task]
    raw = [tuple(r[k].decode() for k in keys) for r in rows]
    got = run.encode([texts if arity == 2 else texts[0] for texts in raw])['inputs']
    want = np.stack([glue_data.preprocess(r, settings)['inputs'] for r in rows])
    np.testing.assert_array_equal(got, want)
  with pytest.raises(ValueError, match=r"^input 0: GLUE cola reads 1 text\(s\) \('sentence',\) "
                     r'per input; got 2'):
    run.encode([('one', 'two')])
