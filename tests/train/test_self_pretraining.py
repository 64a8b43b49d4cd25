"""Self-pretraining on a task's own inputs (data/masking.py, tasks/masked_tokens.py, the
`lra_masked_lm` model, the `spt` config word, init_from's [MASK] row, reproduce --spt)."""
import importlib
import json
import os
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poolformers_jax import reproduce
from poolformers_jax.data import masking
from poolformers_jax.models import build_model
from poolformers_jax.tasks import get_task
from poolformers_jax.trainer import init_from

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, 'configs'))


def _tokens(rng, shape, vocab, padding_from):
  tokens = rng.integers(1, vocab, size=shape)
  tokens[..., padding_from:] = 0
  return tokens


def test_mask_chooses_real_tokens_at_the_rate_and_keeps_the_rest():
  rng = np.random.default_rng(0)
  tokens = _tokens(rng, (64, 512), vocab=18, padding_from=400)
  inputs, targets = masking.mask_tokens(tokens, 0.1, 18, np.random.default_rng(1))
  chosen = targets != masking.NOT_CHOSEN
  assert not chosen[:, 400:].any()                       # padding is never chosen
  assert (inputs[:, 400:] == 0).all()                    # ... and stays padding
  np.testing.assert_array_equal(inputs[chosen], 18)      # chosen -> [MASK] = vocab size
  np.testing.assert_array_equal(targets[chosen], tokens[chosen])
  np.testing.assert_array_equal(inputs[~chosen], tokens[~chosen])
  share = chosen[:, :400].mean()                         # 25 600 Bernoulli(0.1) draws
  assert abs(share - 0.1) < 4 * np.sqrt(0.1 * 0.9 / chosen[:, :400].size)


def test_evaluation_masks_depend_on_the_example_alone():
  rng = np.random.default_rng(0)
  a, b = _tokens(rng, (100,), 257, 80), _tokens(rng, (100,), 257, 90)
  first = masking.mask_tokens(a, 0.5, 257)
  masking.mask_tokens(b, 0.5, 257)                       # another example in between
  np.testing.assert_array_equal(masking.mask_tokens(a, 0.5, 257)[0], first[0])
  trained = masking.mask_tokens(a, 0.5, 257, np.random.default_rng(3))[0]
  assert not np.array_equal(trained, first[0])           # training draws its own


def test_rate_and_data_errors_are_one_line():
  with pytest.raises(ValueError, match='mask_rate=1.0 must be in'):
    masking.check_rate(1.0)
  from poolformers_jax.data.base import DatasetInfo
  images = DatasetInfo('cifar10', 'classification', 10, None, (32, 32, 3), {})
  with pytest.raises(ValueError, match='no token vocabulary'):
    masking.pretraining_info(images)


def test_masked_token_sums_are_the_cross_entropy_of_the_masked_tokens_of_real_examples():
  key = jax.random.PRNGKey(0)
  logits = jax.random.normal(key, (3, 2, 7, 11))          # retrieval-shaped: [B, 2, L, V]
  rng = np.random.default_rng(0)
  targets = np.where(rng.random((3, 2, 7)) < 0.4, rng.integers(0, 11, (3, 2, 7)), -1)
  weights = jnp.array([1.0, 1.0, 0.0])                    # the last example is padding
  sums = get_task('masked_tokens').sums(logits, jnp.asarray(targets), weights)
  scored = (targets >= 0) & (np.asarray(weights) > 0)[:, None, None]
  log_p = np.asarray(jax.nn.log_softmax(logits))
  expected = -sum(log_p[i, j, t, targets[i, j, t]] for i, j, t in zip(*np.nonzero(scored)))
  np.testing.assert_allclose(float(sums['loss']), expected, rtol=1e-5)
  assert float(sums['count']) == scored.sum() and float(sums['examples']) == 2.0
  argmax = np.asarray(logits).argmax(-1)
  assert float(sums['correct']) == (argmax == targets)[scored].sum()
  summary = get_task('masked_tokens').summary(jax.tree.map(float, sums))
  assert summary['loss'] == pytest.approx(expected / scored.sum(), rel=1e-5)


def _lra_model(name, vocab, classes, **extra):
  import ml_collections
  cfg = ml_collections.ConfigDict(dict(
      name=name, mixer='ponet', mixer_kwargs={'segment_num': 4}, dim=16, num_layers=1,
      num_heads=2, mlp_dim=32, head_hidden_dim=16, vocab_size=vocab, max_length=32,
      num_classes=classes, dropout_rate=0.1, attention_dropout_rate=0.1, **extra))
  return build_model(cfg)


def test_masked_lm_has_the_classifier_encoder_and_reads_documents_alone():
  tokens = jnp.asarray(_tokens(np.random.default_rng(0), (2, 2, 32), 19, 25))
  mlm = _lra_model('lra_masked_lm', 19, 19)
  params = mlm.init(jax.random.PRNGKey(0), tokens)['params']
  classifier = _lra_model('lra_dual_encoder', 18, 2).init(jax.random.PRNGKey(0), tokens[:, :, :])
  shapes = jax.tree.map(jnp.shape, params['encoder'])
  expected = jax.tree.map(jnp.shape, classifier['params']['encoder'])
  expected['token_embedding']['embedding'] = (19, 16)    # + the [MASK] row
  chex.assert_trees_all_equal(shapes, expected)
  logits = mlm.apply({'params': params}, tokens)
  chex.assert_shape(logits, (2, 2, 32, 19))
  # A pair is two documents, each encoded on its own: the same as a batch of four documents.
  alone = mlm.apply({'params': params}, tokens.reshape(4, 32))
  chex.assert_trees_all_close(logits.reshape(4, 32, 19), alone, atol=1e-6)


@pytest.mark.parametrize('task,rate', [('lra_listops', 0.1), ('lra_text', 0.15),
                                       ('lra_retrieval', 0.15), ('lra_image', 0.5),
                                       ('lra_pathfinder', 0.5)])
def test_spt_word_changes_only_the_objective(task, rate):
  """The masked objective; `spt_causal` (next tokens): test_next_token_pretraining.py."""
  module = importlib.import_module(task)
  plain, spt = module.get_config('ponet'), module.get_config('ponet,spt')
  assert spt.model.name == 'lra_masked_lm' and spt.data.mask_rate == rate
  assert plain.data.mask_rate == 0.0 and spt.final_test is False
  assert spt.data.next_tokens is False and not spt.model.get('causal')   # spt_causal's: below
  differ = {k for k in plain.keys() if plain[k] != spt[k]}
  assert differ == {'model', 'data', 'final_test'}
  for key in plain.model.keys():
    assert key == 'name' or plain.model[key] == spt.model[key], key
  assert {k for k in plain.data.keys() if plain.data[k] != spt.data[k]} == {'mask_rate'}


def test_init_from_drops_only_the_mask_row():
  old = np.arange(19 * 4, dtype=np.float32).reshape(19, 4)
  np.testing.assert_array_equal(init_from.drop_mask_row('e', old, (18, 4)), old[:-1])
  with pytest.raises(ValueError, match='only the \\[MASK\\] row'):
    init_from.drop_mask_row('e', old, (17, 4))


@pytest.mark.slow
def test_reproduce_spt_runs_both_stages_beside_scratch_and_resumes(tmp_path):
  workdir = str(tmp_path / 'repro')
  argv = ['lra', '--task', 'listops', '--families', 'linear', '--size', 'tiny', '--spt',
          '--spt_steps', '4', '--finetune_steps', '2', '--workdir', workdir,
          '--set', f'data.data_dir={tmp_path / "data"}', '--set', 'num_train_steps=6',
          '--set', 'eval_every_steps=2', '--set', 'checkpoint_every_steps=2',
          '--set', 'progress_bar=False']
  plan = reproduce.command(argv + ['--dry_run'])
  assert plan is None
  results = reproduce.command(argv)
  entry = results['tasks']['listops']
  (scratch,), (spt,) = entry['families']['linear'], entry['spt']['linear']
  assert scratch['steps'] == 6 and spt['steps'] == 2 and spt['pretrain']['steps'] == 4
  pre_dir = os.path.join(workdir, 'listops', 'linear', 'spt_seed0', 'pretrain')
  with open(os.path.join(pre_dir, 'config.json')) as f:
    assert json.load(f)['model']['name'] == 'lra_masked_lm'
  # The fine-tuned run started from the pre-training's best encoder: its token table is the
  # pre-trained one without the [MASK] row, moved by exactly two optimizer steps from it.
  from poolformers_jax.trainer.init_from import read_variables
  pre = read_variables(pre_dir)['params']['encoder']['token_embedding']['embedding']
  ft_dir = os.path.join(workdir, 'listops', 'linear', 'spt_seed0', 'finetune')
  first = read_variables(os.path.join(ft_dir, 'checkpoints', '2'))['params']
  moved = np.abs(np.asarray(first['encoder']['token_embedding']['embedding']) - pre[:-1])
  assert moved.max() < 1e-2                               # lr * 2 steps, not a fresh init
  assert spt['test_accuracy'] is not None and spt['pretrain']['test_accuracy'] is None
  with open(os.path.join(workdir, 'results.md')) as f:
    table = f.read()
  row = next(line for line in table.splitlines() if line.startswith('| listops | linear | ')
             and 'min |' in line and line.count('|') == 12)
  assert f'{scratch["test_accuracy"]:.2f} | {spt["test_accuracy"]:.2f} |' in row
  assert '| 4 | 2 | 0 |' in row
  again = reproduce.command(argv)
  assert again['tasks']['listops']['spt']['linear'][0]['skipped'] is True


def test_retrieval_pairs_self_pretrain_through_the_trainer(tmp_path):
  """The dual-encoder task: each document of a pair is masked and predicted on its own, through
  the pipeline, the one train step and evaluation."""
  from poolformers_jax import config as config_lib, data
  from poolformers_jax.train import train_and_evaluate
  text = 'pooling replaces attention in long documents '
  for split in ('train', 'eval', 'test'):
    with open(tmp_path / f'new_aan_pairs.{split}.tsv', 'w') as f:
      for i in range(16):
        f.write(f'{i % 2}.0\ta\tb\t{text * (1 + i % 3)}\t{text[::-1] * (1 + i % 2)}\n')
  config = config_lib.override(
      importlib.import_module('lra_retrieval').get_config('linear,tiny,spt'),
      **{'data.tsv_dir': str(tmp_path), 'num_train_steps': 4, 'eval_every_steps': 4,
         'checkpoint_every_steps': 4, 'progress_bar': False, 'batch_size': 8})
  info = data.get_dataset_info(data.settings(config.data))
  assert info.task == 'masked_tokens' and info.vocab_size == 258 and info.input_shape == (2, 64)
  batch = next(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                        seed=0))
  chosen = batch['targets'] >= 0
  assert batch['targets'].shape == (8, 2, 64) and chosen[:, 1].any()   # second documents too
  assert (batch['inputs'][chosen] == 257).all() and (batch['targets'][~chosen] == -1).all()
  result = train_and_evaluate(config, str(tmp_path / 'run'))
  assert result.status == 'finished' and result.test is None          # no test for the stage
  assert np.isfinite(result.validation['loss']) and result.validation['count'] > 0
