"""Fixtures of the text tests; the helpers live in text_corpus.py."""
import os

import jax
import pytest
from text_corpus import pretraining_config, write_corpus, write_vocab

from poolformers_jax.eval import evaluate_state
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import setup as setup_lib


@pytest.fixture(scope='session')
def text_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('text')
  vocab = write_vocab(root / 'vocab.txt')
  return {'root': str(root), 'vocab': vocab,
          'train': write_corpus(str(root / 'train'), 240, 0),
          'validation': write_corpus(str(root / 'validation'), 96, 1)}


@pytest.fixture(scope='session')
def pretrained(text_dir):
  """One tiny MLM + SSO pre-training run (train_and_evaluate), and its untrained metrics."""
  config = pretraining_config(text_dir, **{
      # 240 steps at 1e-2: the official N(0, 0.02) init of every Dense learns more slowly at width
      # 32 than Flax's default did (120 steps at 3e-3 then).
      'num_train_steps': 240, 'eval_every_steps': 240, 'checkpoint_every_steps': 240,
      'log_every_steps': 80, 'batch_size': 16, 'eval_batch_size': 32, 'final_test': False,
      'optimizer.learning_rate': 1e-2, 'optimizer.warmup_steps': 10, 'model.dropout_rate': 0.0,
      'num_devices': 1})
  setup = setup_lib.make_setup(config)
  untrained = setup_lib.create_train_state(setup, jax.random.PRNGKey(0))
  before = evaluate_state(config, setup, untrained, 'validation')
  workdir = os.path.join(text_dir['root'], 'pretrain')
  return {'before': before, 'result': train_and_evaluate(config, workdir), 'workdir': workdir,
          'vocab_size': setup.info.vocab_size}
