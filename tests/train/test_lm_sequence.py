"""Character LMs (configs/enwik8.py) trained on the sequence axis (issue #67): a tiny text8 run
with every sequence split over 4 devices equals the same run on one device (the loss of every
step, the final parameters, the sliding-window validation), for each causal mixer with a
sequence-parallel form, and with rematerialised blocks on sequence and fsdp shards; the whole
training step moves the same collectives at two lengths with linear attention (softmax's
gathered keys grow); what cannot split (or a bad remat) is refused in one line."""
import zipfile

import chex
import enwik8
import jax
import numpy as np
import pytest

from poolformers_jax import config as config_lib
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import sharding, step as step_lib
from poolformers_jax.trainer.metrics import read_metrics
from poolformers_jax.trainer.setup import make_setup

# enwik8.py model -> its causal mixer with a sequence-parallel form
MODELS = {'linear_l12': 'linear', 'transformer_l12': 'softmax'}
SMALL = {'model.num_layers': 2, 'model.emb_dim': 16, 'model.mlp_dim': 32, 'model.num_heads': 2}


@pytest.fixture(scope='module')
def text8_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('text8')
  text = ''.join(np.random.default_rng(0).choice(list('abcdefgh '), 1300))
  with zipfile.ZipFile(root / 'text8.zip', 'w') as archive:
    archive.writestr('text8', text)
  return str(root)


def _run(model, data_dir, workdir, **mesh):
  """5 steps of a tiny text8 LM (dropout on), validation by sliding windows; the losses of
  every step, the final parameters and the validation loss."""
  config = config_lib.override(enwik8.get_config(f'{model},tiny,text8'), **SMALL, **{
      'data.data_dir': data_dir, 'data.split_sizes': (1000, 150, 150), 'data.max_length': 16,
      'data.eval_protocol': 'sliding', 'data.eval_context': 16, 'data.eval_step': 4,
      'batch_size': 4, 'eval_batch_size': 4, 'num_train_steps': 5, 'eval_every_steps': 5,
      'checkpoint_every_steps': 5, 'log_every_steps': 1, 'progress_bar': False,
      'final_test': False, 'optimizer.learning_rate': 1e-2, 'optimizer.warmup_steps': 1, **mesh})
  result = train_and_evaluate(config, workdir)
  assert result.status == 'finished'
  losses = [r['loss'] for r in read_metrics(workdir, 'train')]
  assert len(losses) == 5
  return losses, jax.tree.map(np.asarray, jax.device_get(result.state.params)), result.validation


@pytest.fixture(scope='module')
def one_device_run(text8_dir, tmp_path_factory):
  """model -> its `_run` on one device, run once per module (the reference of two tests)."""
  runs = {}

  def run(model):
    if model not in runs:
      runs[model] = _run(model, text8_dir, str(tmp_path_factory.mktemp(model)), num_devices=1)
    return runs[model]
  return run


@pytest.mark.parametrize('model', sorted(MODELS))
def test_a_sequence_sharded_lm_run_equals_the_run_on_one_device(model, text8_dir, tmp_path,
                                                                one_device_run):
  losses, params, validation = one_device_run(model)
  sharded = _run(model, text8_dir, str(tmp_path / 'sequence'),
                 **{'mesh.data': 2, 'mesh.sequence': 4})
  np.testing.assert_allclose(sharded[0], losses, rtol=1e-4)
  assert losses[-1] < losses[0] - 0.1   # it learns: the steps differ, not one loss repeated
  # Softmax's key bias has a zero gradient (it adds q . b to every score of a query's row, which
  # the softmax ignores): Adam scales its float32 round-off to steps of the learning rate.
  compared = lambda path: MODELS[model] != 'softmax' or not path.endswith('key/bias')
  flat = lambda tree: {name: leaf for name, leaf in (
      ('/'.join(k.key for k in path), leaf) for path, leaf in
      jax.tree_util.tree_leaves_with_path(tree)) if compared(name)}
  assert len(flat(params)) >= 20
  chex.assert_trees_all_close(flat(sharded[1]), flat(params), atol=1e-4)
  # 150 validation symbols in sliding windows of 16 every 4: each of 149 predictions scored once
  assert sharded[2]['count'] == validation['count'] == 149
  np.testing.assert_allclose(sharded[2]['loss'], validation['loss'], rtol=1e-4)


def test_rematerialised_blocks_on_sequence_and_fsdp_shards_equal_the_plain_run(
    text8_dir, tmp_path, one_device_run):
  """config.model.remat='full' (nn.remat around each block, the mixers' shard_map inside) on 4
  sequence shards x 2 fsdp shards (every parameter of 16+ values split): the same losses and
  final parameters as the plain run on one device, within 1e-4."""
  losses, params, _ = one_device_run('linear_l12')
  remat = _run('linear_l12', text8_dir, str(tmp_path / 'remat'), **{
      'model.remat': 'full', 'mesh.data': 1, 'mesh.fsdp': 2, 'mesh.sequence': 4,
      'mesh.fsdp_min_size': 16})
  np.testing.assert_allclose(remat[0], losses, rtol=1e-4)
  chex.assert_trees_all_close(remat[1], params, atol=1e-4)


def _collectives(model, length):
  config = config_lib.load(f'configs/enwik8.py:{model},tiny', {
      **SMALL, 'model.num_layers': 1, 'data.max_length': length, 'batch_size': 1,
      'mesh.data': 1, 'mesh.sequence': 8})
  compiled = step_lib.compile_train_step(make_setup(config, need_files=False)).run
  return sorted(sharding.collective_ops(compiled.as_text()))


def test_the_linear_lm_step_moves_nothing_that_grows_with_the_length():
  """The whole training step on 8 sequence shards, at 64 and 128 tokens: linear attention's
  collectives (op and every shape: the gathered chunk states, the gradients' all-reduce) are
  the same; softmax's are not (its keys and values are gathered: the check can fail)."""
  linear = [_collectives('linear_l12', n) for n in (64, 128)]
  assert linear[0] and linear[0] == linear[1]
  softmax = [_collectives('transformer_l12', n) for n in (64, 128)]
  assert softmax[0] != softmax[1]


@pytest.mark.parametrize('updates,message', [
    ({'mesh.sequence': 4, 'data.eval_protocol': 'sliding', 'data.eval_context': 30},
     r"sequence=4 does not divide the sliding evaluation's windows of "
     r'config.data.eval_context=30 symbols; set config.data.eval_context to a multiple of 4'),
    ({'mesh.sequence': 2, 'model.mixer': 'contextpool'},
     r"mixer 'contextpool' .* has no sequence-parallel form.*, of which causal \(a language "
     r"model\): \['linear', 'softmax'\]"),
    ({'mesh.sequence': 2, 'model.mixer': 'msac'}, r"mixer 'msac' .* has no sequence-parallel"),
    ({'model.remat': 'all'}, r"^config.model.remat='all' is not a rematerialisation policy; "
     'choose one of none, full, dots'),
])
def test_what_an_lm_cannot_split_is_refused_in_one_line_before_compiling(updates, message):
  with pytest.raises(ValueError, match=message) as error:
    make_setup(config_lib.load('configs/enwik8.py:linear_l12,tiny', updates), need_files=False)
  assert '\n' not in str(error.value)
