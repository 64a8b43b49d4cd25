"""One training step (train/step.py): the memory `python -m poolformers_jax.summary` prints is the
`memory_analysis()` of the very step the trainer compiles and runs, for a tiny ListOps run, a
tiny HVT with mixup / cutmix on CIFAR (tfds mock data), and the paper's WMT14 Transformer-Base
(the setup it compiles)."""
import os

import jax
import pytest
import tensorflow_datasets as tfds

import cifar
from tiny_runs import REPO, tiny_config
from poolformers_jax import summary
from poolformers_jax.train import cli, config_utils, step, train_and_evaluate
from poolformers_jax.train.setup import make_setup

ONE_STEP = {'num_train_steps': 1, 'log_every_steps': 1, 'eval_every_steps': 1,
            'checkpoint_every_steps': 1, 'final_test': False, 'num_devices': 1,
            'progress_bar': False}


def _trained_step_memory(config, workdir) -> dict:
  result = train_and_evaluate(config, workdir)
  assert result.status == 'finished' and result.step == 1
  return result.train_step_memory


def test_summary_memory_is_the_memory_of_the_listops_step_the_trainer_ran(data_dir, tmp_path):
  config = tiny_config(data_dir, **ONE_STEP)
  trained = _trained_step_memory(config, str(tmp_path / 'run'))
  out = summary.summarize(config)
  assert out['train_step_memory'] == trained
  assert out['train_step_memory_bytes'] == trained['total'] > 0


def test_summary_memory_is_the_memory_of_the_mixup_hvt_step_the_trainer_ran(tmp_path):
  config = config_utils.override(cifar.get_config('hvt_s_1,cifar10'), **ONE_STEP, **{
      'batch_size': 8, 'optimizer.warmup_steps': 1, 'data.data_dir': str(tmp_path / 'data'),
      'data.image_size': 32, 'model.image_size': 32, 'model.patch_size': 8,
      'model.hidden_dim': 16, 'model.num_heads': 2, 'model.depth': 2})
  assert config.mixup.cutmix_alpha > 0            # the step mixes the batch
  with tfds.testing.mock_data(num_examples=12):
    trained = _trained_step_memory(config, str(tmp_path / 'run'))
  out = summary.summarize(config)                 # no data: sizes from the dataset's constants
  assert out['train_step_memory'] == trained and out['batch_size'] == 8


def test_wmt14_base_is_sized_and_summary_compiles_the_trainers_step(monkeypatch):
  """`python -m poolformers_jax.summary --config configs/wmt14.py:base` prints 60.52 M parameters
  and the memory of compile_train_step(setup) for the trainer's setup. Compiling Base's step
  takes minutes and 5-7 GB of host memory on XLA:CPU, too much for the suite, so the compile is
  replaced by a spy here; the two tests above compare compiled bytes with a real trainer run."""
  compiled = []
  memory = {'argument': 1, 'output': 2, 'temp': 3, 'alias': 1, 'total': 5}

  def spy(setup):
    compiled.append(setup)
    return step.CompiledStep(run=None, sums_shapes=None, memory=memory)

  monkeypatch.setattr(step, 'compile_train_step', spy)
  config = cli.load_config_file(os.path.join(REPO, 'configs', 'wmt14.py') + ':base')
  out = summary.summarize(config, batch_size=8)
  assert out['model'] == 'transformer_seq2seq' and round(out['params'] / 1e6, 2) == 60.52
  assert out['train_step_memory'] == memory and out['train_step_memory_bytes'] == 5
  # The trainer compiles its step with compile_train_step(make_setup(config)) (loop.py); the
  # data's files are missing here, so the sizes come from the dataset's constants.
  setup = make_setup(config_utils.override(config, num_devices=1, batch_size=8), need_files=False)
  assert setup.info.packed and setup.config.model.vocab_size == 32000
  (summarized,) = compiled
  assert summarized.config.to_dict() == setup.config.to_dict() and summarized.info == setup.info
  shapes = lambda state: jax.tree.map(lambda a: (a.shape, a.dtype), state)
  for part in ('params', 'opt_state'):
    assert (shapes(getattr(summarized.abstract_state, part))
            == shapes(getattr(setup.abstract_state, part)))
  assert out['batch_size'] == 8 and out['input_shape'] == [256]
