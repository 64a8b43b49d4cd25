"""The official PoNet-Base weights format: our port of the authors' PyTorch model reproduces its
outputs. The fixture (tests/fixtures/ponet_tiny.*) is made by the authors' modeling code with

    /tmp/hfenv/bin/python tests/fixtures/make_ponet_fixture.py --official_dir PoNet/models

in a venv of torch 2.13.0 (CPU), transformers 4.46.3, safetensors 0.8.0, numpy 2.4.6 and
lxchtan/PoNet @ ae23a71 (the script's docstring: environment and the two run-time shims); that
command regenerates the three committed files byte for byte."""
import json
import os
import shutil
import sys

import flax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from poolformers_jax import convert
from poolformers_jax.models import build_model
from poolformers_jax.models import ponet_convert
from poolformers_jax.train import config_utils, init_from

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
  for case, segments in (('derived', None), ('explicit', jnp.asarray(io['segment_ids'], jnp.int32))):
    out, state = model.apply({'params': params}, ids, segment_ids=segments,
                             token_type_ids=jnp.asarray(io['token_type_ids'], jnp.int32),
                             capture_intermediates=lambda m, _: m.name in ('mlm_transform', 'pooler'),
                             mutable=['intermediates'])
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
  for case, segments in (('derived', None), ('explicit', io['segment_ids'])):
    _, state = model.apply({'params': params}, jnp.asarray(io['input_ids'], jnp.int32),
                           segment_ids=None if segments is None else jnp.asarray(segments, jnp.int32),
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
  config = config_utils.override(ponet_pretrain.get_config('sso,tiny'), **{
      'model.emb_dim': 8, 'model.mlp_dim': 16})
  convert.convert(config, str(folder), str(tmp_path / 'run'))
  read = init_from.read_variables(str(tmp_path / 'run'))['params']
  flat = lambda t: {'/'.join(k): np.asarray(v)
                    for k, v in flax.traverse_util.flatten_dict(dict(t)).items()}
  expected, got = flat(params), flat(read)
  assert sorted(expected) == sorted(got)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  wrong = config_utils.override(config, **{'model.num_layers': 3})
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
  return config_utils.override(ponet_pretrain.get_config('sso,tiny'), **{
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
  with pytest.raises(FileExistsError, match='already holds model.safetensors'):
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
  config = config_utils.override(glue.get_config('mnli,tiny'), **{
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
  read = ponet_convert.read_torch_zip(os.path.join(FIXTURES, 'ponet_tiny.bin'))
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
    ponet_convert.read_torch_zip(str(evil))
  assert 'torch' not in sys.modules
