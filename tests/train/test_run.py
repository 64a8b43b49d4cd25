"""load_run: a trained run used from Python gives what eval.py gives, on the run's own input
processing; config.load / complete; one-line refusals."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tiny_runs import REPO, tiny_config

import poolformers_jax
from poolformers_jax.data import listops_tokens
from poolformers_jax.data.generators import listops as listops_generator
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import checkpoint as checkpoint_lib
from poolformers_jax.trainer.setup import make_setup


@pytest.fixture(scope='module')
def run_dir(data_dir, tmp_path_factory):
  """A 4-step tiny ListOps run (seconds), its own: eval.py writes records into it."""
  workdir = str(tmp_path_factory.mktemp('load_run'))
  config = tiny_config(data_dir, num_train_steps=4, eval_every_steps=2, checkpoint_every_steps=2)
  train_and_evaluate(config, workdir)
  return workdir


@pytest.fixture(scope='module')
def tsv_dir(tmp_path_factory):
  """20 ListOps trees in the official TSV format (with parentheses), short enough for the run."""
  out = str(tmp_path_factory.mktemp('listops_tsv'))
  listops_generator.main(['--out_dir', out, '--seed', '1', '--num_test', '20', '--min_tokens', '5',
                          '--max_tokens', '30'])
  return out


def _tsv(tsv_dir):
  with open(os.path.join(tsv_dir, 'basic_test.tsv')) as f:
    rows = [line.rstrip('\n').split('\t') for line in f][1:]
  return [source for source, _ in rows], np.asarray([int(target) for _, target in rows])


def test_predict_on_an_official_tsv_file_gives_eval_pys_accuracy(run_dir, tsv_dir):
  sources, labels = _tsv(tsv_dir)
  assert all('(' in s for s in sources)   # the official form: load_run drops them as the run did
  proc = subprocess.run(
      [sys.executable, 'eval.py', '--workdir', run_dir, '--checkpoint', 'best', '--split', 'test',
       '--config', 'configs/lra_listops.py:transformer,tiny', '--config.data.source=tsv',
       f'--config.data.tsv_dir={tsv_dir}', *[f'--config.{k}={v}' for k, v in _model(run_dir)]],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  reported = json.loads(proc.stdout.strip().splitlines()[-1])
  assert reported['count'] == len(sources) == 20
  run = poolformers_jax.load_run(run_dir)   # 'best', as eval.py's default
  assert run.step == reported['step'] and run.task == 'classification'
  predictions = run.predict(sources, batch_size=8)   # 20 = 8 + 8 + 4 padded: batch-free
  assert predictions.shape == (20,) and predictions.dtype.kind == 'i'
  assert float(np.mean(predictions == labels)) == reported['accuracy']
  # logits are the model's; predict is their argmax; encode strips the parentheses.
  logits = run.logits(sources[:3])
  assert logits.shape == (3, 10)
  np.testing.assert_array_equal(logits.argmax(-1), predictions[:3])
  encoded = run.encode(sources[:1])['inputs']
  plain = [token for token in sources[0].split() if token not in '()']
  assert encoded.shape == (1, run.config.data.max_length)
  np.testing.assert_array_equal(encoded[0, :len(plain)], listops_tokens.encode(plain))
  assert not encoded[0, len(plain):].any()


def _model(run_dir):
  """The tiny overrides of the run's model, as --config keys for eval.py (the model must match)."""
  saved = json.load(open(os.path.join(run_dir, 'config.json')))
  return [(f'model.{k}', saved['model'][k]) for k in ('dim', 'mlp_dim', 'head_hidden_dim',
                                                      'num_layers')] + [
      ('data.max_length', saved['data']['max_length'])]


def test_checkpoints_by_name_and_step_and_the_params_are_the_checkpoints(run_dir):
  latest = poolformers_jax.load_run(run_dir, checkpoint='latest')
  assert latest.step == 4 and poolformers_jax.load_run(run_dir, checkpoint=2).step == 2
  setup = make_setup(latest.config, need_files=False)
  state, _ = checkpoint_lib.restore_state_for_reading(run_dir, latest.config, 'latest',
                                                      setup.abstract_state)
  import jax
  same = jax.tree.map(lambda a, b: bool((np.asarray(a) == np.asarray(b)).all()), latest.params,
                      state.params)
  assert all(jax.tree.leaves(same))


def test_load_run_logs_no_warnings(run_dir, caplog):
  """No orbax 'Sharding info not provided' (the abstract state carries the shardings) nor its
  notes that a read-only manager is read-only."""
  import logging
  with caplog.at_level(logging.INFO):
    poolformers_jax.load_run(run_dir)
  assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_one_line_refusals(run_dir, tmp_path):
  with pytest.raises(FileNotFoundError, match='not found: pass the workdir of a train.py run'):
    poolformers_jax.load_run(str(tmp_path / 'nothing'))
  with pytest.raises(FileNotFoundError, match='config.json not found'):
    poolformers_jax.load_run(str(tmp_path))
  with pytest.raises(ValueError, match=r"no checkpoint at step 3; kept steps"):
    poolformers_jax.load_run(run_dir, checkpoint=3)
  with pytest.raises(ValueError, match='no averaged checkpoint'):
    poolformers_jax.load_run(run_dir, checkpoint='averaged')
  run = poolformers_jax.load_run(run_dir, checkpoint='latest')
  deep = '[MAX ' * 20 + '1 ' + '] ' * 20   # 41 tokens > max_length 32
  with pytest.raises(ValueError, match=r"^input 1: ListOps example has 41 tokens > "
                     r"config.data.max_length=32, too long for this run's model; shorten it, or "
                     r"pass too_long='truncate'"):
    run.predict(['[MAX 2 9 ]', deep])
  assert run.predict(['[MAX 2 9 ]', deep], too_long='truncate').shape == (2,)
  with pytest.raises(ValueError, match=r"^input 0: token '\[MAXX' is not in the ListOps vocab"):
    run.encode(['[MAXX 2 9 ]'])
  with pytest.raises(ValueError, match='one string: pass a list'):
    run.predict('[MAX 2 9 ]')


def test_a_run_loads_without_its_data_files_on_the_devices_at_hand(run_dir, tmp_path):
  """A run trained on the LRA TSV files loads where they are absent: the model needs no file."""
  import shutil
  copy = str(tmp_path / 'run')
  shutil.copytree(run_dir, copy)
  path = os.path.join(copy, 'config.json')
  config = json.load(open(path))
  config['data'].update(source='tsv', tsv_dir=str(tmp_path / 'absent'))
  # Batch sizes that do not split over the 8 devices here: as many devices as split them evenly.
  config.update(batch_size=6, eval_batch_size=3)
  json.dump(config, open(path, 'w'))
  run = poolformers_jax.load_run(copy, checkpoint='latest')
  assert run.predict(['[MAX 2 9 ]', '[MIN 4 7 ]'], batch_size=2).shape == (2,)
  leaf = run.params['head']['logits']['kernel']
  assert leaf.sharding.mesh.devices.size == 3 and leaf.sharding.is_fully_replicated


def test_a_damaged_checkpoint_is_refused_in_one_line(run_dir, tmp_path):
  import shutil
  copy = str(tmp_path / 'run')
  shutil.copytree(run_dir, copy)
  step_dir = os.path.join(copy, checkpoint_lib.LATEST_DIR, '4', 'state')
  victim = max((os.path.join(root, n) for root, _, names in os.walk(step_dir) for n in names),
               key=os.path.getsize)
  with open(victim, 'r+b') as f:
    f.seek(os.path.getsize(victim) // 2)
    byte = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([byte[0] ^ 0xFF]))
  with pytest.raises(checkpoint_lib.CheckpointError, match=r'checkpoint .*4 is damaged \('):
    poolformers_jax.load_run(copy, checkpoint='latest')


def test_restore_for_reading_reads_the_parameters_alone(run_dir):
  """A dict of some of the state's fields reads those only (verified against the record); it was
  refused as 'a different model: it has step, which this config does not'. Each reader takes one
  type: the whole state goes to restore_state_for_reading, a dict of fields to
  restore_for_reading."""
  run = poolformers_jax.load_run(run_dir, checkpoint='latest')
  setup = make_setup(run.config, need_files=False)
  whole, step = checkpoint_lib.restore_state_for_reading(run_dir, run.config, 'latest',
                                                         setup.abstract_state)
  part, same_step = checkpoint_lib.restore_for_reading(run_dir, run.config, 'latest',
                                                       {'params': setup.abstract_state.params})
  assert sorted(part) == ['params'] and same_step == step == 4
  import jax
  assert jax.tree.structure(part['params']) == jax.tree.structure(whole.params)
  assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool((np.asarray(a) == np.asarray(b)).all()),
                                          part['params'], whole.params)))
  with pytest.raises(ValueError, match=r"\['weights'\] are no fields of a train state"):
    checkpoint_lib.restore_for_reading(run_dir, run.config, 'latest',
                                       {'weights': setup.abstract_state.params})
  with pytest.raises(TypeError, match=r'pass a dict of some of .* not a TrainState; the whole '
                     r'state: restore_state_for_reading'):
    checkpoint_lib.restore_for_reading(run_dir, run.config, 'latest', setup.abstract_state)
  with pytest.raises(TypeError, match=r'a dict of some fields: restore_for_reading'):
    checkpoint_lib.restore_state_for_reading(run_dir, run.config, 'latest',
                                             {'params': setup.abstract_state.params})
  wrong = jax.tree.map(lambda a: jax.ShapeDtypeStruct((a.shape[0] + 1,) + a.shape[1:], a.dtype,
                                                      sharding=a.sharding),
                       {'params': setup.abstract_state.params})
  with pytest.raises(ValueError, match=r'made by a different model: params/\S+ has shape'):
    checkpoint_lib.restore_for_reading(run_dir, run.config, 'latest', wrong)


def test_config_load_is_the_trainers_and_complete_fills_what_build_model_needs(data_dir):
  sys.path.insert(0, os.path.join(REPO, 'configs'))
  import lra_listops
  config = poolformers_jax.config.load('configs/lra_listops.py:ponet,tiny', {'model.dim': 32})
  expected = lra_listops.get_config('ponet,tiny')
  with expected.unlocked():
    expected.model.dim = 32
  assert config.to_dict() == expected.to_dict() and config.is_locked
  with pytest.raises(KeyError, match=r"unknown config key 'model.dmi'; did you mean model.dim"):
    poolformers_jax.config.load('configs/lra_listops.py:ponet,tiny', {'model.dmi': 32})
  with pytest.raises(FileNotFoundError, match=r'configs/nope.py not found: give a config file'):
    poolformers_jax.config.load('configs/nope.py:tiny')
  from poolformers_jax.models import build_model
  with pytest.raises(ValueError, match=r"^model 'lra_encoder': config.model.\{max_length, "
                     r'num_classes, vocab_size\} unset: the dataset decides them; fill them with '
                     r'config = poolformers_jax.config.complete\(config\)'):
    build_model(config.model)
  local = poolformers_jax.config.load('configs/lra_listops.py:ponet,tiny',
                                      {'data.data_dir': data_dir})
  completed = poolformers_jax.config.complete(local)
  assert (completed.model.vocab_size, completed.model.num_classes,
          completed.model.max_length) == (18, 10, 48)
  assert build_model(completed.model).vocab_size == 18


def _images(shape):
  return np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize('name,raw,record', [
    ('lra_text', 'héllo, wörld', {'text': 'héllo, wörld'.encode(), 'label': 1}),   # TFDS: bytes
    ('lra_retrieval', ('first paper', 'second one'),
     {'text1': 'first paper', 'text2': 'second one', 'label': 0}),
    ('lra_image', _images((32, 32, 3)), {'image': _images((32, 32, 3)), 'label': 3}),
    ('lra_pathfinder', _images((32, 32)), {'image': _images((32, 32)), 'label': 1}),
    ('cifar10', _images((32, 32, 3)), {'image': _images((32, 32, 3)), 'label': 3}),
], ids=['lra_text', 'lra_retrieval', 'lra_image', 'lra_pathfinder', 'cifar10'])
def test_encode_makes_the_datasets_own_eval_examples(name, raw, record):
  """A raw input becomes what the dataset's source + preprocess make of the same content."""
  import types

  import ml_collections

  from poolformers_jax.data import DATASETS, get_data_config, settings
  from poolformers_jax.tasks import get_task
  data_config = get_data_config(name)
  if name in ('lra_text', 'lra_retrieval'):
    data_config.max_length = 64
  run = poolformers_jax.Run(
      workdir='w', checkpoint='best', step=0, model=None, params=None,
      config=ml_collections.ConfigDict({'data': data_config}),
      setup=types.SimpleNamespace(info=types.SimpleNamespace(task='classification'),
                                   task=get_task('classification'), data=settings(data_config)))
  want = DATASETS[name].preprocess(record, settings(data_config), None)['inputs']
  got = run.encode([raw, raw])['inputs']
  assert got.shape == (2,) + want.shape and got.dtype == want.dtype
  np.testing.assert_array_equal(got[1], want)
