"""config.init_from: parameters only, position embeddings resized as DeiT's fine-tuning code
does."""
import logging
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict
from tiny_runs import tiny_config

from poolformers_jax.eval import evaluate
from poolformers_jax.models.vit import VisionTransformer
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import init_from

# torch 2.13 `F.interpolate(g[None, None], size=..., mode='bicubic', align_corners=False)`, float64
# (the call in DeiT's main.py), computed once; torch is not needed to run this file.
GRID3 = np.array([[0.3, -1.2, 0.7], [2.0, 0.1, -0.4], [0.5, 1.5, -2.2]])
TORCH_GRID3_TO_5 = np.array([
    [0.2771136, -0.5836896, -1.3248, -0.1262304, 1.0101184],
    [1.246544, 0.2580256, -0.7964, -0.1966976, 0.5179232],
    [2.1824, 1.2988, 0.1, -0.3428, -0.448],
    [1.219184, 1.3340944, 1.0504, -0.5709824, -1.8333952],
    [0.2332736, 1.1405376, 1.6344, -0.7259616, -2.7574912]])
GRID4 = np.arange(16.0).reshape(4, 4) ** 1.5 / 10
TORCH_GRID4_TO_3 = np.array([[0.1044041074, 0.3093447726, 0.6464963111],
                             [1.4774768689, 2.0206585168, 2.6165299424],
                             [3.9755748799, 4.695705437, 5.4593936196]])


def test_bicubic_matches_pytorch_up_and_down():
  np.testing.assert_allclose(init_from.resize_grid(GRID3[..., None], (5, 5))[..., 0],
                             TORCH_GRID3_TO_5, atol=1e-7)
  np.testing.assert_allclose(init_from.resize_grid(GRID4[..., None], (3, 3))[..., 0],
                             TORCH_GRID4_TO_3, atol=1e-9)


def test_position_table_keeps_class_token_and_resizes_the_grid():
  rng = np.random.default_rng(0)
  cls = rng.normal(size=(1, 1, 2))
  grid = np.stack([GRID3, -2 * GRID3], -1)                    # two channels, [3, 3, 2]
  old = np.concatenate([cls, grid.reshape(1, 9, 2)], axis=1)  # [1, 1 + 9, 2]
  new = init_from.resize_position_embedding('pos_embed/pos_embedding', old, (1, 26, 2))
  np.testing.assert_array_equal(new[:, :1], cls)
  np.testing.assert_allclose(new[0, 1:, 0].reshape(5, 5), TORCH_GRID3_TO_5, atol=1e-7)
  np.testing.assert_allclose(new[0, 1:, 1].reshape(5, 5), -2 * TORCH_GRID3_TO_5, atol=1e-7)
  # Without a class token (HVT stage 0) the whole table is the grid.
  new = init_from.resize_position_embedding('pos_embed/pos_embedding', grid.reshape(1, 9, 2),
                                            (1, 25, 2))
  np.testing.assert_allclose(new[0, :, 0].reshape(5, 5), TORCH_GRID3_TO_5, atol=1e-7)


def _vit_params(image_size, **kw):
  """A ViT's parameter tree (real names and shapes) filled with random numbers."""
  model = VisionTransformer(num_classes=3, image_size=image_size, patch_size=4, hidden_dim=8,
                            depth=2, num_heads=2, **kw)
  images = jax.ShapeDtypeStruct((1, image_size, image_size, 3), jnp.float32)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)['params']
  rng = np.random.default_rng(image_size)   # the real names and shapes, random values, no compile
  return jax.tree.map(lambda s: rng.normal(size=s.shape).astype(np.float32), shapes)


def test_vit_224_to_384_style_and_hvt_stages_load_into_the_bigger_model():
  old = _vit_params(8)                     # 2 x 2 patches + class token
  target = _vit_params(12)                 # 3 x 3 patches + class token
  new = init_from.load_init_params(old, target)
  with pytest.raises(TypeError, match=r"takes the checkpoint's tree, not the path '/a/run'"):
    init_from.load_init_params('/a/run', target)     # one type: read_variables(path) first
  flat = lambda t: {k: np.asarray(v) for k, v in flatten_dict(t, sep='/').items()}
  o, n = flat(old), flat(new)
  for name in o:
    if name != 'pos_embed/pos_embedding':
      np.testing.assert_array_equal(n[name], o[name])
  table = n['pos_embed/pos_embedding']
  assert table.shape == (1, 10, 8)
  np.testing.assert_array_equal(table[:, 0], o['pos_embed/pos_embedding'][:, 0])
  grid = o['pos_embed/pos_embedding'][0, 1:].reshape(2, 2, 8).astype(np.float64)
  np.testing.assert_allclose(table[0, 1:].reshape(3, 3, 8),
                             init_from.resize_grid(grid, (3, 3)), atol=1e-6)

  # HVT, 1D pooling: 4x4 -> 7 pooled tokens at 16 px; 6x6 -> 17 at 24 px.
  hvt = dict(classifier='mean', num_stages=1)
  old = _vit_params(16, **hvt)
  target = _vit_params(24, **hvt)
  new = init_from.load_init_params(old, target)
  stage_old = np.asarray(old['pos_embed_stage1']['pos_embedding'], np.float64)
  stage_new = np.asarray(new['pos_embed_stage1']['pos_embedding'])
  assert stage_old.shape[1] == 7 and stage_new.shape[1] == 17
  np.testing.assert_allclose(stage_new[0], init_from.cubic_resize_matrix(7, 17) @ stage_old[0],
                             atol=1e-6)
  grid = np.asarray(old['pos_embed']['pos_embedding'][0], np.float64).reshape(4, 4, 8)
  np.testing.assert_allclose(np.asarray(new['pos_embed']['pos_embedding'][0]).reshape(6, 6, 8),
                             init_from.resize_grid(grid, (6, 6)), atol=1e-6)


def test_missing_head_refused_unless_allowed_unmatched_shape_one_line_and_1d_rule_hook(caplog):
  old = {'body': {'kernel': np.ones((2, 2))}, 'pos': {'table': np.arange(4.0)[:, None]}}
  target = {'body': {'kernel': jnp.zeros((2, 2))}, 'head': {'kernel': jnp.zeros((2, 3))},
            'pos': {'table': jnp.zeros((8, 1))}}
  with pytest.raises(ValueError, match=r"1 params cannot be matched.*pos/table \(4, 1\) -> "
                                       r"\(8, 1\).*init_from_fresh") as err:
    init_from.load_init_params(old, target)
  assert '\n' not in str(err.value)
  tile = lambda name, a, shape: np.resize(a, shape)          # a cyclic-tiling rule, as PoNet's
  # A parameter the checkpoint lacks fails (one line naming it) unless allowed by name.
  with pytest.raises(ValueError, match=r"init_from: 1 params missing from the checkpoint: "
                                       r"head/kernel\..*init_from_allow_missing") as err:
    init_from.load_init_params(old, target, resize_rules=[(r'^pos/', tile)])
  assert '\n' not in str(err.value) and 'pos/table' not in str(err.value)
  with caplog.at_level(logging.INFO):
    new = init_from.load_init_params(old, target, resize_rules=[(r'^pos/', tile)],
                                     allow_missing='^head/')
  np.testing.assert_array_equal(new['pos']['table'][:, 0], [0, 1, 2, 3, 0, 1, 2, 3])
  np.testing.assert_array_equal(new['body']['kernel'], np.ones((2, 2)))
  np.testing.assert_array_equal(new['head']['kernel'], np.zeros((2, 3)))
  fresh_lines = [r.message for r in caplog.records if 'freshly initialised' in r.message]
  assert len(fresh_lines) == 1 and 'head/kernel' in fresh_lines[0]
  # `fresh` keeps a parameter the checkpoint has as initialised (a new head of another size).
  new = init_from.load_init_params(old, target, resize_rules=[(r'^pos/', tile)], fresh='^body/',
                                   allow_missing='^head/')
  np.testing.assert_array_equal(new['body']['kernel'], np.zeros((2, 2)))


def test_loop_takes_parameters_only_from_a_workdir(data_dir, tmp_path):
  """init_from with num_train_steps=0 (load, then evaluate): the parameters of the source run,
  a fresh optimizer, and a test result equal to evaluating the source's checkpoint; the new
  workdir holds that state as step 0, which eval.py reads."""
  source = train_and_evaluate(tiny_config(data_dir, final_test=False), str(tmp_path / 'a'))
  config = tiny_config(data_dir, num_train_steps=0, init_from=str(tmp_path / 'a'))
  result = train_and_evaluate(config, str(tmp_path / 'b'))
  expected = evaluate(None, str(tmp_path / 'a'), checkpoint='best', split='test')
  packed = tmp_path / 'packed'       # a finished run kept with best/ alone (listops_column's pack)
  shutil.copytree(tmp_path / 'a', packed, ignore=shutil.ignore_patterns('checkpoints'))
  assert evaluate(None, str(packed), checkpoint='best', split='test')['loss'] == expected['loss']
  assert result.status == 'finished' and result.step == 0 and expected['step'] == 3
  assert {k: result.test[k] for k in ('loss', 'accuracy', 'count', 'step')} == {
      'loss': expected['loss'], 'accuracy': expected['accuracy'], 'count': 20, 'step': 0}
  again = evaluate(None, str(tmp_path / 'b'), checkpoint='latest', split='test')
  assert (again['loss'], again['step']) == (expected['loss'], 0)
  assert result.validation['count'] == 20
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               result.state.params, source.state.params)
  assert int(result.state.step) == 0                      # fresh step ...
  assert all(float(jnp.abs(x).max()) == 0.0 for x in       # ... and fresh Adam moments
             jax.tree.leaves(result.state.opt_state) if x.ndim > 0)
  assert any(float(jnp.abs(x).max()) > 0 for x in jax.tree.leaves(source.state.opt_state)
             if x.ndim > 0)
  step_dir = init_from.read_variables(str(tmp_path / 'a' / 'checkpoints' / '3'))['params']
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, np.asarray(b)), step_dir,
               source.state.params)
  shutil.rmtree(tmp_path / 'a' / 'best')          # only checkpoints/ (as convert.py writes)
  assert init_from.checkpoint_dir(str(tmp_path / 'a')).endswith('/checkpoints/3/state')
  with pytest.raises(FileNotFoundError, match='neither a workdir'):
    init_from.checkpoint_dir(str(tmp_path / 'nothing'))
