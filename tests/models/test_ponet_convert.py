"""The official PoNet-Base weights format: our port of the authors' PyTorch model reproduces its
outputs (fixture made once with their modeling code: tests/fixtures/make_ponet_fixture.py)."""
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
