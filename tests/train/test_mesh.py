"""The named mesh (config.mesh): data / fsdp / sequence axes, FSDP's placement rule, and training
on any mesh equal to one device -- one step (loss, gradient norm, parameters), a 50-step run, and
checkpoints saved on one mesh resumed, evaluated and predicted on another."""
import os
import shutil

import chex
import jax
import lra_listops
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from tiny_runs import tiny_config

from poolformers_jax import config as config_lib, load_run
from poolformers_jax.eval import evaluate
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import setup as setup_lib, sharding, step as step_lib
from poolformers_jax.trainer.metrics import read_metrics
from poolformers_jax.trainer.setup import make_setup


def test_mesh_sizes_fill_the_rest_and_refuse_what_does_not_fit_in_one_line():
  assert sharding.mesh_sizes(8, {}) == {'data': 8, 'fsdp': 1, 'sequence': 1}
  assert sharding.mesh_sizes(8, {'data': -1, 'fsdp': 2, 'sequence': 2}) == {
      'data': 2, 'fsdp': 2, 'sequence': 2}
  assert sharding.mesh_sizes(8, {'data': 1, 'fsdp': -1}) == {'data': 1, 'fsdp': 8, 'sequence': 1}
  for sizes, message in [({'fsdp': 3}, 'do not divide the 8 devices'),
                         ({'data': 2, 'fsdp': 2, 'sequence': 1}, 'spans 4 devices'),
                         ({'data': -1, 'fsdp': -1}, 'at most one -1'),
                         ({'tensor': 2}, 'no axis')]:
    with pytest.raises(ValueError, match=message) as error:
      sharding.mesh_sizes(8, sizes)
    assert '\n' not in str(error.value)


def test_fsdp_splits_the_largest_dimension_the_axis_divides_and_replicates_small_leaves():
  rules = sharding.FsdpRules(min_size=64)
  assert rules.spec('params/w', (16, 64), 8) == P(None, 'fsdp')
  assert rules.spec('params/w', (64, 12), 8) == P('fsdp', None)
  assert rules.spec('params/w', (12, 20), 8) == P()          # no dimension divides
  assert rules.spec('params/b', (32,), 8) == P()             # under min_size
  assert rules.spec('params/w', (16, 64), 1) == P()          # no fsdp axis
  over = sharding.FsdpRules(('embedding=fsdp,', 'bias='), min_size=64)
  assert over.spec('params/encoder/Embed_0/embedding', (16, 64), 8) == P('fsdp', None)
  with pytest.raises(ValueError, match='not "regex=spec"'):
    sharding.FsdpRules(('kernel=model',)).spec('kernel', (8, 8), 8)


def _batch(setup, seed=0):
  """A deterministic host batch of the setup's training examples, rows padded differently."""
  rng = np.random.default_rng(seed)
  spec = step_lib.batch_spec(setup)
  length = spec['inputs'].shape[1]
  tokens = rng.integers(1, setup.info.vocab_size, spec['inputs'].shape).astype(np.int32)
  tokens[1::2, length - 5:] = 0   # padding crosses shard boundaries
  targets = rng.integers(0, setup.info.num_classes, spec['targets'].shape).astype(np.int32)
  return {'inputs': tokens, 'targets': targets}


def _one_step(family, **updates):
  """(loss, grad norm, parameters) after one training step of the tiny ListOps model."""
  config = config_lib.override(lra_listops.get_config(f'{family},tiny'), **{
      'model.dim': 16, 'model.mlp_dim': 16, 'model.num_layers': 2, 'data.max_length': 32,
      'batch_size': 8, 'mesh.fsdp_min_size': 64, **updates})
  setup = make_setup(config, need_files=False)
  compiled = step_lib.compile_train_step(setup)
  state = setup_lib.create_train_state(setup, jax.random.PRNGKey(0))
  state, acc = compiled.run(state, compiled.new_accumulator(setup.mesh),
                            compiled.put(_batch(setup)), jax.random.PRNGKey(1))
  return jax.device_get((acc['sums']['loss'], acc['grad_norm'], state.params)), state


# sequence 8 alone is compiled by the collectives test below (PoNet's whole step at two lengths).
MESHES = {'fsdp8': {'mesh.data': 1, 'mesh.fsdp': 8},
          'data2-fsdp2-sequence2': {'mesh.fsdp': 2, 'mesh.sequence': 2}}


@pytest.fixture(scope='module')
def ponet_one_device():
  return _one_step('ponet', num_devices=1)[0]


@pytest.mark.parametrize('mesh', sorted(MESHES))
def test_one_step_on_a_mesh_equals_one_device(ponet_one_device, mesh):
  (loss, norm, params), state = _one_step('ponet', **MESHES[mesh])
  ref_loss, ref_norm, ref_params = ponet_one_device
  chex.assert_trees_all_close(loss, ref_loss, rtol=1e-5)
  chex.assert_trees_all_close(norm, ref_norm, rtol=1e-5)   # the whole gradient's size
  # Adam's first step is lr * g / (|g| + eps): parameters agree to float32 rounding of g
  chex.assert_trees_all_close(params, ref_params, rtol=1e-5, atol=1e-6)
  kernel = state.params['encoder']['block_0']['PoNet_0']['segment']['kernel']
  fsdp = int(MESHES[mesh].get('mesh.fsdp', 1))
  assert kernel.addressable_shards[0].data.shape[1] == 16 // fsdp   # FSDP really splits it


# softmax's gathered form is checked at the layer (tests/layers/test_sequence_parallel_attention.py)
@pytest.mark.parametrize('family', ['linear', 'adamra'])
def test_one_step_of_every_sequence_parallel_family_on_data_fsdp_and_sequence(family):
  (loss, norm, params), _ = _one_step(family, **MESHES['data2-fsdp2-sequence2'])
  (ref_loss, ref_norm, ref_params), _ = _one_step(family, num_devices=1)
  chex.assert_trees_all_close(loss, ref_loss, rtol=1e-5)
  chex.assert_trees_all_close(norm, ref_norm, rtol=1e-5)
  chex.assert_trees_all_close(params, ref_params, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope='module')
def fsdp_run(data_dir, tmp_path_factory):
  """50 steps of tiny PoNet ListOps on data 2 x fsdp 2 x sequence 2, and on data 8."""
  runs = {}
  for name, mesh in [('mesh', {'mesh.fsdp': 2, 'mesh.sequence': 2, 'mesh.fsdp_min_size': 64}),
                     ('data', {})]:
    workdir = str(tmp_path_factory.mktemp(name))
    config = tiny_config(data_dir, 'ponet', num_train_steps=50, log_every_steps=1,
                         eval_every_steps=25, checkpoint_every_steps=25, **mesh)
    runs[name] = config, workdir, train_and_evaluate(config, workdir)
  return runs


def _losses(workdir):
  return np.array([r['loss'] for r in read_metrics(workdir, 'train')])


def test_fifty_steps_on_a_mesh_follow_the_data_parallel_run(fsdp_run):
  (_, on_mesh, _), (_, data_parallel, _) = fsdp_run['mesh'], fsdp_run['data']
  losses = _losses(on_mesh)
  assert len(losses) == 50
  np.testing.assert_allclose(losses, _losses(data_parallel), rtol=1e-4)


def test_a_run_saved_on_one_mesh_is_read_exactly_on_another(fsdp_run, data_dir):
  config, workdir, result = fsdp_run['mesh']
  saved = jax.tree.map(np.asarray, jax.device_get(result.state.params))
  # load_run: its own (data-parallel) devices; the parameters restored bit for bit
  run = load_run(workdir, checkpoint='latest')
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, run.variables['params']), saved)
  # eval.py on one device and on fsdp 8: the training's own test numbers
  for mesh in ({'num_devices': 1, 'mesh.fsdp': 1, 'mesh.sequence': 1},
               {'mesh.data': 1, 'mesh.fsdp': 8, 'mesh.sequence': 1}):
    other = config_lib.override(config, **mesh)
    metrics = evaluate(other, workdir, checkpoint=result.test['checkpoint'], split='test')
    assert metrics['accuracy'] == result.test['accuracy'] and metrics['count'] == 20
    assert metrics['loss'] == pytest.approx(result.test['loss'], rel=1e-6)


def test_a_run_saved_on_one_mesh_resumes_on_another(fsdp_run, tmp_path):
  """The data 2 x fsdp 2 x sequence 2 run's step-25 checkpoint, resumed on one device: steps
  26-50 give the losses the run gave on its own mesh."""
  _, workdir, _ = fsdp_run['mesh']
  moved = str(tmp_path / 'moved')
  shutil.copytree(workdir, moved)
  shutil.rmtree(os.path.join(moved, 'checkpoints', '50'))   # the newest left: step 25
  config = config_lib.override(fsdp_run['mesh'][0], **{'num_devices': 1, 'mesh.fsdp': 1,
                                                      'mesh.sequence': 1})
  resumed = train_and_evaluate(config, moved)
  assert resumed.step == 50
  by_step = lambda d: {r['step']: r['loss'] for r in read_metrics(d, 'train')}   # last wins
  again, before = by_step(moved), by_step(workdir)
  np.testing.assert_allclose([again[s] for s in range(26, 51)],
                             [before[s] for s in range(26, 51)], rtol=1e-5)


@pytest.mark.parametrize('spec,updates,message', [
    ('configs/lra_listops.py:ponet,tiny', {'mesh.fsdp': 3}, 'do not divide the 8 devices'),
    ('configs/lra_listops.py:ponet,tiny', {'mesh.sequence': 4, 'data.max_length': 30},
     'does not divide the sequence length 30'),
    ('configs/lra_listops.py:ponet,tiny', {'mesh.rules': 'kernel=model'}, 'not "regex=spec"'),
    ('configs/lra_listops.py:ponet,tiny', {'mesh.fsdp': 8, 'mesh.data': 1, 'batch_size': 4},
     'must be divisible by the number of devices'),
    ('configs/cifar.py:hvt_s_4', {'mesh.sequence': 2}, 'splits token sequences'),
])
def test_what_a_mesh_cannot_split_is_refused_in_one_line_before_compiling(spec, updates,
                                                                           message):
  with pytest.raises(ValueError, match=message) as error:
    make_setup(config_lib.load(spec, updates), need_files=False)
  assert '\n' not in str(error.value)


def test_a_mixer_without_a_sequence_parallel_form_is_refused_before_the_model_is_built():
  config = config_lib.load('configs/lra_listops.py:msac,tiny', {'mesh.sequence': 2})
  with pytest.raises(ValueError, match=r"mixer 'msac' .* no sequence-parallel form.*'ponet'"):
    make_setup(config, need_files=False)


def test_a_sequence_sharded_ponet_step_moves_nothing_that_grows_with_the_length():
  """The whole training step of the PoNet LRA encoder on 8 sequence shards: the same
  collectives (op and every shape) at 64 and 128 tokens: parameter gradients, GA's partial sums,
  SMP's end segments, LMP's halos; the learned position table stays split like the tokens."""
  found = []
  for length in (64, 128):
    config = config_lib.load('configs/lra_listops.py:ponet,tiny', {
        'data.max_length': length, 'batch_size': 1, 'mesh.data': 1, 'mesh.sequence': 8,
        'model.mixer_kwargs.segment_num': 4})
    compiled = step_lib.compile_train_step(make_setup(config, need_files=False)).run
    found.append(sorted(sharding.collective_ops(compiled.as_text())))
  assert found[0] and found[0] == found[1]
