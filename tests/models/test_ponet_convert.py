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
from safetensors.numpy import load_file

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
