"""The official PoNet-Base weights format: our port of the authors' PyTorch model reproduces its
outputs. The fixture (tests/fixtures/ponet_tiny.*) is made by the authors' modeling code with

    /tmp/hfenv/bin/python tests/fixtures/make_ponet_fixture.py --official_dir PoNet/models

in a venv of torch 2.13.0 (CPU), transformers 4.46.3, safetensors 0.8.0, numpy 2.4.6 and
lxchtan/PoNet @ ae23a71 (the script's docstring: environment and the two run-time shims); that
command regenerates the three committed files byte for byte."""
import json
import os
import shutil
import subprocess
import sys

import flax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from poolformers_jax import config as config_lib, convert
from poolformers_jax.models import build_model
from poolformers_jax.trainer import init_from
from poolformers_jax.weights import ponet as ponet_convert, state_dict

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures')


@pytest.fixture(scope='module')
def ported():
  with open(os.path.join(FIXTURES, 'ponet_tiny_config.json')) as f:
    config = ponet_convert.model_config(json.load(f))
  state = load_file(os.path.join(FIXTURES, 'ponet_tiny.safetensors'))
  model = build_model(ml_collections.ConfigDict(dict(name='ponet_mlm', **config)))
  return model, ponet_convert.convert_state_dict(state), state


def test_port_reproduces_official_outputs(ported):
  model, params, _ = ported
  io = np.load(os.path.join(FIXTURES, 'ponet_tiny_io.npz'))
  ids = jnp.asarray(io['input_ids'], jnp.int32)
  real = io['input_ids'] != 0
  captured = {}
  explicit = jnp.asarray(io['segment_ids'], jnp.int32)
  captures = lambda m, _: m.name in ('mlm_transform', 'pooler')
  for case, segments in (('derived', None), ('explicit', explicit)):
    out, state = model.apply({'params': params}, ids, segment_ids=segments,
                             token_type_ids=jnp.asarray(io['token_type_ids'], jnp.int32),
                             capture_intermediates=captures, mutable=['intermediates'])
    captured[case] = out
    np.testing.assert_allclose(np.asarray(out['sso_logits']), io[f'{case}_sso_logits'], atol=1e-4)
    pooled = np.tanh(np.asarray(state['intermediates']['pooler']['__call__'][0]))
    np.testing.assert_allclose(pooled, io[f'{case}_pooled'], atol=1e-4)
  np.testing.assert_allclose(np.asarray(captured['derived']['mlm_logits'])[real],
                             io['derived_mlm_logits_real'], atol=1e-4)


def test_hidden_states_match(ported):
  model, params, _ = ported
  io = np.load(os.path.join(FIXTURES, 'ponet_tiny_io.npz'))
  real = io['input_ids'] != 0
  ours = {}
  explicit = jnp.asarray(io['segment_ids'], jnp.int32)
  for case, segments in (('derived', None), ('explicit', explicit)):
    _, state = model.apply({'params': params}, jnp.asarray(io['input_ids'], jnp.int32),
                           segment_ids=segments,
                           token_type_ids=jnp.asarray(io['token_type_ids'], jnp.int32),
                           capture_intermediates=lambda m, _: m.name == 'layer_1',
                           mutable=['intermediates'])
    ours[case] = hidden = np.asarray(state['intermediates']['layer_1']['__call__'][0])
    np.testing.assert_allclose(hidden[real], io[f'{case}_hidden'][real], atol=1e-4)
  # Our model reads the explicit segment_ids (they change its output, so the explicit match
  # above is not the derived path matching twice).
  assert np.abs(ours['derived'] - ours['explicit'])[real].max() > 0.1


def test_converter_rejects_foreign_and_untied(ported):
  _, params, state = ported
  assert params['token_embed']['embedding'].shape == (104, 8)
  with pytest.raises(ValueError, match='unknown parameter'):
    ponet_convert.convert_state_dict({**state, 'ponet.encoder.layer.0.attention.self.query.weight':
                                      np.zeros((8, 8), np.float32)})
  untied = dict(state, **{'cls.predictions.decoder.weight': np.zeros((104, 8), np.float32)})
  with pytest.raises(ValueError, match='differs from the word embeddings'):
    ponet_convert.convert_state_dict(untied)


def test_convert_cli_path_writes_what_init_from_reads(ported, tmp_path):
  """chtan/ponet-base-uncased folder layout -> poolformers_jax.convert -> config.init_from."""
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(FIXTURES)), 'configs'))
  import ponet_pretrain  # pylint: disable=g-import-not-at-top
  _, params, _ = ported
  folder = tmp_path / 'ponet-base-uncased'
  folder.mkdir()
  shutil.copy(os.path.join(FIXTURES, 'ponet_tiny.safetensors'), folder / 'model.safetensors')
  shutil.copy(os.path.join(FIXTURES, 'ponet_tiny_config.json'), folder / 'config.json')
  config = config_lib.override(ponet_pretrain.get_config('sso,tiny'), **{
      'model.emb_dim': 8, 'model.mlp_dim': 16})
  convert.convert(config, str(folder), str(tmp_path / 'run'))
  read = init_from.read_variables(str(tmp_path / 'run'))['params']
  flat = lambda t: {'/'.join(k): np.asarray(v)
                    for k, v in flax.traverse_util.flatten_dict(dict(t)).items()}
  expected, got = flat(params), flat(read)
  assert sorted(expected) == sorted(got)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  wrong = config_lib.override(config, **{'model.num_layers': 3})
  with pytest.raises(ValueError, match='num_layers: config 3 vs checkpoint 2'):
    convert.convert(wrong, str(folder), str(tmp_path / 'run2'))


def _folder_without(tmp_path, deleted):
  """The fixture as a chtan/ponet-base-uncased folder, the tensors `deleted` left out."""
  state = load_file(os.path.join(FIXTURES, 'ponet_tiny.safetensors'))
  folder = tmp_path / 'incomplete'
  folder.mkdir()
  save_file({k: v for k, v in state.items() if k not in deleted}, str(folder / 'model.safetensors'))
  shutil.copy(os.path.join(FIXTURES, 'ponet_tiny_config.json'), folder / 'config.json')
  return folder


def _pretrain_config():
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(FIXTURES)), 'configs'))
  import ponet_pretrain  # pylint: disable=g-import-not-at-top
  return config_lib.override(ponet_pretrain.get_config('sso,tiny'), **{
      'model.emb_dim': 8, 'model.mlp_dim': 16})


def test_convert_refuses_an_incomplete_checkpoint_in_one_line(ported, tmp_path):
  """The SSO head and one layer's local projection deleted: convert names them and writes
  nothing; allowing the head by name converts the rest exactly, the head freshly initialised."""
  _, params, _ = ported
  local = 'ponet.encoder.layer.1.attention.self.dense_local.weight'
  folder = _folder_without(tmp_path, {'cls.seq_relationship.weight', 'cls.seq_relationship.bias',
                                      local})
  with pytest.raises(ValueError, match=r'3 missing from the checkpoint \[.*layer_1/PoNet_0/local/'
                                       r'kernel.*sso_head/bias.*sso_head/kernel') as err:
    convert.convert(_pretrain_config(), str(folder), str(tmp_path / 'run'))
  assert '\n' not in str(err.value) and not os.path.exists(tmp_path / 'run')
  # Allowing the head does not allow the encoder weight.
  with pytest.raises(ValueError, match=r"1 missing from the checkpoint \['layer_1/PoNet_0/local/"
                                       r"kernel'\]"):
    convert.convert(_pretrain_config(), str(folder), str(tmp_path / 'run'),
                    allow_missing='^sso_head/')
  (tmp_path / 'b').mkdir()
  folder = _folder_without(tmp_path / 'b', {'cls.seq_relationship.weight',
                                            'cls.seq_relationship.bias'})
  convert.convert(_pretrain_config(), str(folder), str(tmp_path / 'run'),
                  allow_missing='^sso_head/')
  got = flax.traverse_util.flatten_dict(init_from.read_variables(str(tmp_path / 'run'))['params'])
  expected = flax.traverse_util.flatten_dict(params)
  assert sorted(got) == sorted(expected)
  for path, value in expected.items():
    if path[0] != 'sso_head':
      np.testing.assert_array_equal(got[path], value, err_msg='/'.join(path))
  assert not np.allclose(got[('sso_head', 'kernel')], expected[('sso_head', 'kernel')])


def test_init_from_refuses_missing_encoder_weights(ported, tmp_path):
  """A checkpoint without one layer's local projection: fine-tuning from it fails in one line
  naming it (before, the random init was kept with an INFO log)."""
  model, params, _ = ported
  target = ponet_convert.model_params(ml_collections.ConfigDict(dict(
      name='ponet_classifier', num_classes=2,
      **ponet_convert.model_config(json.load(open(os.path.join(FIXTURES,
                                                               'ponet_tiny_config.json')))))),
      abstract=False)
  source = flax.traverse_util.flatten_dict(params)
  del source[('layer_1', 'PoNet_0', 'local', 'kernel')]
  source = flax.traverse_util.unflatten_dict(source)
  with pytest.raises(ValueError, match=r'init_from: 1 params missing from the checkpoint: '
                                       r'layer_1/PoNet_0/local/kernel\. .*unused: mlm_bias') as err:
    init_from.load_init_params(source, target, allow_missing='^classifier/')
  assert '\n' not in str(err.value) and 'classifier' not in str(err.value).split('. Allow')[0]
  loaded = init_from.load_init_params(params, target, allow_missing='^classifier/')
  np.testing.assert_array_equal(loaded['layer_1']['PoNet_0']['local']['kernel'],
                                params['layer_1']['PoNet_0']['local']['kernel'])


def _flat(tree):
  return {'/'.join(k): np.asarray(v)
          for k, v in flax.traverse_util.flatten_dict(dict(tree)).items()}


def test_hf_round_trip_ours_to_hf_to_ours(ported, tmp_path):
  """Fixture -> our checkpoint -> `convert --to hf` gives back the official tensors and config
  exactly (so the official code loads it as it made it); init_from reads that folder directly,
  equal to what we exported, and the model on it reproduces the official outputs."""
  model, params, state = ported
  folder = _folder_without(tmp_path, set())
  convert.convert(_pretrain_config(), str(folder), str(tmp_path / 'run'))
  hf = tmp_path / 'hf'
  convert.export_hf(_pretrain_config(), str(tmp_path / 'run'), str(hf))
  exported = load_file(str(hf / 'model.safetensors'))
  assert sorted(exported) == sorted(state)
  for name, value in state.items():
    np.testing.assert_array_equal(exported[name], value, err_msg=name)
  with open(hf / 'config.json') as f:
    written = json.load(f)
  with open(os.path.join(FIXTURES, 'ponet_tiny_config.json')) as f:
    official = json.load(f)
  assert {k: written[k] for k in official} == official
  assert written['architectures'] == ['PoNetForPreTraining']
  back = init_from.read_variables(str(hf))['params']
  assert sorted(_flat(back)) == sorted(_flat(params))
  for name, value in _flat(params).items():
    np.testing.assert_array_equal(_flat(back)[name], value, err_msg=name)
  io = np.load(os.path.join(FIXTURES, 'ponet_tiny_io.npz'))
  out = model.apply({'params': back}, jnp.asarray(io['input_ids'], jnp.int32),
                    token_type_ids=jnp.asarray(io['token_type_ids'], jnp.int32))
  np.testing.assert_allclose(np.asarray(out['sso_logits']), io['derived_sso_logits'], atol=1e-4)
  with pytest.raises(convert.ConversionError, match='already holds model.safetensors'):
    convert.export_hf(_pretrain_config(), str(tmp_path / 'run'), str(hf))


def test_hf_sequence_classification_layout(ported, tmp_path):
  """PoNetForSequenceClassification folders (classifier.* instead of cls.*): init_from reads the
  trained head with the encoder (nothing allowed missing), convert fills a ponet_classifier
  config from them, and they export back to the same tensors."""
  _, params, state = ported
  rng = np.random.default_rng(0)
  tuned = {k: v for k, v in state.items() if not k.startswith('cls.')}
  tuned['classifier.weight'] = rng.normal(size=(3, 8)).astype(np.float32)
  tuned['classifier.bias'] = rng.normal(size=(3,)).astype(np.float32)
  folder = tmp_path / 'mnli'
  folder.mkdir()
  save_file(tuned, str(folder / 'model.safetensors'))
  shutil.copy(os.path.join(FIXTURES, 'ponet_tiny_config.json'), folder / 'config.json')
  with open(os.path.join(FIXTURES, 'ponet_tiny_config.json')) as f:
    sizes = ponet_convert.model_config(json.load(f))
  classifier = ml_collections.ConfigDict(dict(name='ponet_classifier', num_classes=3, **sizes))
  target = ponet_convert.model_params(classifier, abstract=False)
  loaded = init_from.load_init_params(init_from.read_variables(str(folder))['params'], target)
  np.testing.assert_array_equal(loaded['classifier']['kernel'], tuned['classifier.weight'].T)
  np.testing.assert_array_equal(loaded['layer_1']['PoNet_0']['local']['kernel'],
                                params['layer_1']['PoNet_0']['local']['kernel'])
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(FIXTURES)), 'configs'))
  import glue  # pylint: disable=g-import-not-at-top
  config = config_lib.override(glue.get_config('mnli,tiny'), **{
      'model.emb_dim': 8, 'model.mlp_dim': 16, 'model.num_heads': 2})
  filled, converted = ponet_convert.config_and_params(config, str(folder))
  assert filled.model.num_classes == 3 and filled.model.vocab_size == 104
  np.testing.assert_array_equal(converted['classifier']['bias'], tuned['classifier.bias'])
  ponet_convert.save_hf(str(tmp_path / 'back'), loaded, classifier)
  again = load_file(str(tmp_path / 'back' / 'model.safetensors'))
  assert sorted(again) == sorted(tuned)
  for name, value in tuned.items():
    np.testing.assert_array_equal(again[name], value, err_msg=name)
  with open(tmp_path / 'back' / 'config.json') as f:
    assert json.load(f)['id2label'] == {'0': 'LABEL_0', '1': 'LABEL_1', '2': 'LABEL_2'}


def test_pytorch_model_bin_read_without_torch(ported, tmp_path):
  """pytorch_model.bin (torch.save's zip; tests/fixtures/ponet_tiny.bin holds the fixture's state
  dict, written by make_ponet_fixture.py) reads without torch to the same arrays, also as a
  folder through init_from; a pickle that names anything but tensors is refused."""
  import pickle  # pylint: disable=g-import-not-at-top
  import zipfile
  assert 'torch' not in sys.modules
  _, params, state = ported
  read = state_dict.read_torch_zip(os.path.join(FIXTURES, 'ponet_tiny.bin'))
  assert sorted(read) == sorted(state)
  for name, value in state.items():
    assert read[name].dtype == np.float32
    np.testing.assert_array_equal(read[name], value, err_msg=name)
  folder = tmp_path / 'bin'
  folder.mkdir()
  shutil.copy(os.path.join(FIXTURES, 'ponet_tiny.bin'), folder / 'pytorch_model.bin')
  shutil.copy(os.path.join(FIXTURES, 'ponet_tiny_config.json'), folder / 'config.json')
  back = _flat(init_from.read_variables(str(folder))['params'])
  for name, value in _flat(params).items():
    np.testing.assert_array_equal(back[name], value, err_msg=name)
  evil = tmp_path / 'evil.bin'
  with zipfile.ZipFile(evil, 'w') as archive:
    archive.writestr('evil/data.pkl', pickle.dumps({'x': os.getcwd}))
  with pytest.raises(pickle.UnpicklingError, match='not a tensor of a known type'):
    state_dict.read_torch_zip(str(evil))
  assert 'torch' not in sys.modules


def _run_of(tmp_path, state, name='run', **overrides):
  """`state` (official names) as a chtan/ponet-base-uncased folder, converted into a run
  directory (DIR/checkpoints/0 + config.json: what train.py leaves) of the tiny config."""
  folder = tmp_path / f'{name}_source'
  folder.mkdir()
  save_file(state, str(folder / 'model.safetensors'))
  shutil.copy(os.path.join(FIXTURES, 'ponet_tiny_config.json'), folder / 'config.json')
  convert.convert(config_lib.override(_pretrain_config(), **overrides), str(folder),
                  str(tmp_path / name))
  return str(tmp_path / name)


def test_export_takes_the_runs_model_and_records_where_it_came_from(ported, tmp_path):
  """`--to hf` writes the run's architecture (2 heads), never --config's: the documented
  `ponet_pretrain.py:sso` (12 heads, width 768) is refused in one line naming every differing
  key and writes nothing. The folder says which run, checkpoint, step and commit it holds."""
  _, _, state = ported
  run = _run_of(tmp_path, state)
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(FIXTURES)), 'configs'))
  import ponet_pretrain  # pylint: disable=g-import-not-at-top
  with pytest.raises(config_lib.ModelMismatch) as error:
    convert.export_hf(ponet_pretrain.get_config('sso'), run, str(tmp_path / 'hf'))
  assert ('model.emb_dim 768 (run: 8), model.mlp_dim 3072 (run: 16), model.num_heads 12 (run: 2), '
          'model.num_layers 12 (run: 2); ') in str(error.value) and '\n' not in str(error.value)
  assert not os.path.exists(tmp_path / 'hf')
  written = convert.export_hf(None, run, str(tmp_path / 'hf'))
  with open(tmp_path / 'hf' / 'config.json') as f:
    config = json.load(f)
  with open(os.path.join(FIXTURES, 'ponet_tiny_config.json')) as f:
    official = json.load(f)
  assert {k: config[k] for k in official} == official     # the official sizes: 2 heads
  assert config['num_attention_heads'] == 2 and config['architectures'] == ['PoNetForPreTraining']
  commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
                          cwd=FIXTURES).stdout.strip()
  record = {'run': run, 'checkpoint': 'checkpoints/0', 'step': 0}
  assert {k: written[k] for k in record} == record
  assert config['poolformers_jax_export'] == {k: v for k, v in written.items() if k != 'hf_folder'}
  assert written['commit'].startswith(commit) and len(commit) >= 7
  readme = (tmp_path / 'hf' / 'README.md').read_text()
  assert f'source run: {run}' in readme and 'token_type_ids' in readme and commit in readme
  exported = load_file(str(tmp_path / 'hf' / 'model.safetensors'))
  assert sorted(exported) == sorted(state)


def test_nsp_head_is_refused_unless_dropped_mlm_only_exports_without_one(ported, tmp_path):
  """The official PoNetForPreTraining's sentence head has 3 classes: a run with a 2-class (NSP)
  head is refused in one line and nothing is written; --drop_sentence_head exports every other
  tensor exactly, and says so. An MLM-only run exports without a head, and says so."""
  _, _, state = ported
  nsp = {k: v for k, v in state.items() if not k.startswith('cls.seq_relationship')}
  rng = np.random.default_rng(0)
  nsp['cls.seq_relationship.weight'] = rng.normal(size=(2, 8)).astype(np.float32)
  nsp['cls.seq_relationship.bias'] = rng.normal(size=(2,)).astype(np.float32)
  run = _run_of(tmp_path, nsp)
  assert init_from.read_variables(run)['params']['sso_head']['kernel'].shape == (8, 2)
  with pytest.raises(convert.ConversionError, match=r"this run's sentence head has 2 classes "
                     r'\(NSP\) and the official PoNetForPreTraining cannot load it .* pass '
                     r'--drop_sentence_head') as error:
    convert.export_hf(None, run, str(tmp_path / 'hf'))
  assert '\n' not in str(error.value) and not os.path.exists(tmp_path / 'hf')
  written = convert.export_hf(None, run, str(tmp_path / 'hf'), drop_sentence_head=True)
  assert written['heads'].startswith('encoder + MLM head, sentence head dropped')
  exported = load_file(str(tmp_path / 'hf' / 'model.safetensors'))
  kept = {k: v for k, v in state.items() if not k.startswith('cls.seq_relationship')}
  assert sorted(exported) == sorted(kept)
  for name, value in kept.items():
    np.testing.assert_array_equal(exported[name], value, err_msg=name)
  assert 'sentence head dropped' in (tmp_path / 'hf' / 'README.md').read_text()
  (tmp_path / 'mlm').mkdir()
  mlm_run = _run_of(tmp_path / 'mlm', kept, **{'model.sentence_classes': 0})
  written = convert.export_hf(None, mlm_run, str(tmp_path / 'hf_mlm'))
  assert written['heads'].startswith('encoder + MLM head, sentence head none in this run')
  assert sorted(load_file(str(tmp_path / 'hf_mlm' / 'model.safetensors'))) == sorted(kept)


def _command(*args):
  """`python *args` in the repository (CPU), as a user runs it."""
  repo = os.path.dirname(os.path.dirname(FIXTURES))
  return subprocess.run([sys.executable, *args], cwd=repo, capture_output=True, text=True,
                        timeout=300, env={**os.environ, 'JAX_PLATFORMS': 'cpu', 'PYTHONPATH': repo})


def test_a_second_architecture_word_is_refused_on_the_command_line(ported, tmp_path):
  """A run exported with its own architecture word, then read again with another (`small`):
  one `error:` line naming the differing keys, exit 2; eval.py refuses it the same way."""
  _, _, state = ported
  run = _run_of(tmp_path, state)
  sizes = ['--config.model.emb_dim=8', '--config.model.mlp_dim=16']
  ok = _command('-m', 'poolformers_jax.convert', '--to', 'hf', '--config',
               'configs/ponet_pretrain.py:sso,tiny', *sizes, '--source', run, '--workdir',
               str(tmp_path / 'hf'))
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert json.loads(ok.stdout.strip().splitlines()[-1])['run'] == run
  keys = ('model.emb_dim 256 (run: 8), model.mlp_dim 1024 (run: 16), model.num_heads 4 (run: 2), '
          'model.num_layers 4 (run: 2)')
  for args in (['-m', 'poolformers_jax.convert', '--to', 'hf', '--source', run, '--workdir',
                str(tmp_path / 'hf2')], ['eval.py', '--workdir', run]):
    refused = _command(*args, '--config', 'configs/ponet_pretrain.py:sso,small')
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and lines[-1].startswith('error: --config describes another '
                                                            f'model than the run in {run}')
    assert keys in lines[-1] and 'Traceback' not in refused.stderr, refused.stderr[-2000:]
  assert not os.path.exists(tmp_path / 'hf2')


def test_convert_missing_sources_fail_in_one_line(tmp_path):
  """A missing .safetensors and a missing PoNet folder: one `error:` line naming the path given
  (not its parent's config.json), exit 2, no traceback."""
  repo = os.path.dirname(os.path.dirname(FIXTURES))
  for config, source, expected in (
      ('configs/imagenet.py:deit_ti', 'missing.safetensors',
       f'error: {repo}/missing.safetensors not found: pass --source a .safetensors or .pth '
       'checkpoint.'),
      ('configs/ponet_pretrain.py:sso', 'ponet-base-uncased',
       f'error: --source {repo}/ponet-base-uncased not found: pass the chtan/ponet-base-uncased '
       'folder')):
    failed = _command('-m', 'poolformers_jax.convert', '--config', config, '--source', source,
                     '--workdir', str(tmp_path / 'out'))
    lines = [line for line in failed.stderr.splitlines() if line.strip()]
    assert failed.returncode == 2 and lines[-1].startswith(expected), failed.stderr[-2000:]
    assert 'Traceback' not in failed.stderr
