"""Next-token self-pretraining (issue #46, the causal objective of Amos et al. 2024):
data/masking.py `next_tokens`, the 'next_tokens' task, the `lra_causal_lm` model
(SequenceEncoder.causal), the `spt_causal` config word, the refusal of mixers without a causal
form, init_from into the bidirectional classifier and `reproduce lra --spt --spt_objective
causal`."""
import importlib
import re

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import tiny_runs

from poolformers_jax import reproduce, testing
from poolformers_jax.config.lra import FAMILIES
from poolformers_jax.data import masking
from poolformers_jax.data.base import DatasetInfo
from poolformers_jax.experiments import lra
from poolformers_jax.layers.registry import causal_mixers
from poolformers_jax.models import build_model
from poolformers_jax.tasks import get_task

# LRA families whose mixer has a causal form (ponet and adamra have none: refused below)
CAUSAL_FAMILIES = ('transformer', 'linear', 'contextpool', 'msac')
VOCAB, LENGTH = 19, 24


def _model(name, family='transformer', vocab=VOCAB, classes=VOCAB, **extra):
  mixer, mixer_kwargs = FAMILIES[family]
  return build_model(ml_collections.ConfigDict(dict(
      name=name, mixer=mixer, mixer_kwargs=dict(mixer_kwargs), dim=16, num_layers=2, num_heads=2,
      mlp_dim=32, head_hidden_dim=16, vocab_size=vocab, max_length=LENGTH, num_classes=classes,
      dropout_rate=0.1, attention_dropout_rate=0.1, **extra)))


def _tokens(seed, shape, lengths):
  """Random real ids in [1, VOCAB) followed by padding: row i has lengths[i] real tokens."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, VOCAB, size=shape)
  tokens[np.arange(shape[-1])[None, :] >= np.asarray(lengths)[:, None]] = 0
  return tokens.astype(np.int32)


# ------------------------------------------------------------------------------------ data

def test_next_token_targets_are_the_following_real_tokens_each_document_alone():
  tokens = np.array([[[5, 6, 7, 0, 0], [1, 2, 3, 4, 9]],
                     [[8, 0, 0, 0, 0], [0, 0, 0, 0, 0]]])          # retrieval-shaped [B, 2, L]
  targets = masking.next_tokens(tokens)
  np.testing.assert_array_equal(targets, [[[6, 7, -1, -1, -1], [2, 3, 4, 9, -1]],
                                          [[-1, -1, -1, -1, -1], [-1, -1, -1, -1, -1]]])
  objective = masking.objective(mask_rate=0.0, next_tokens=True)
  assert objective == masking.NEXT_TASK
  example = masking.pretraining_example({'inputs': tokens, 'targets': np.int32(1)}, objective,
                                        0.0, 10)
  np.testing.assert_array_equal(example['inputs'], tokens)           # inputs unchanged, no [MASK]
  np.testing.assert_array_equal(example['targets'], targets)         # the label is dropped
  info = masking.pretraining_info(DatasetInfo('lra_listops', 'classification', 10, 18, (5,), {}),
                                  objective)
  assert (info.task, info.vocab_size, info.num_classes) == ('next_tokens', 18, 18)
  assert masking.objective(mask_rate=0.1) == masking.TASK and masking.objective() is None
  with pytest.raises(ValueError, match='pick one self-pretraining objective'):
    masking.objective(mask_rate=0.1, next_tokens=True)
  images = DatasetInfo('cifar10', 'classification', 10, None, (32, 32, 3), {})
  with pytest.raises(ValueError, match=r'no token vocabulary.*next_tokens=False'):
    masking.pretraining_info(images, objective)


# ----------------------------------------------------------------------------------- model

@pytest.mark.parametrize('family', CAUSAL_FAMILIES)
def test_causal_lm_has_the_classifier_encoder_parameters_exactly(family):
  tokens = jnp.asarray(_tokens(0, (2, LENGTH), [LENGTH, 15]))
  lm = _model('lra_causal_lm', family).init(jax.random.PRNGKey(0), tokens)['params']
  classifier = _model('lra_encoder', family, classes=3).init(jax.random.PRNGKey(0),
                                                            tokens)['params']
  assert set(lm) == {'encoder', 'lm_head'} and set(classifier) == {'encoder', 'head'}
  # Same names, same shapes (no [MASK] row): init_from reads every encoder parameter unchanged.
  chex.assert_trees_all_equal_shapes_and_dtypes(lm['encoder'], classifier['encoder'])
  chex.assert_shape(lm['lm_head']['kernel'], (16, VOCAB))


def test_causal_lm_reads_a_retrieval_pair_as_two_documents():
  pair = jnp.asarray(_tokens(1, (4, LENGTH), [LENGTH, 10, 20, 5]).reshape(2, 2, LENGTH))
  lm = _model('lra_causal_lm')
  params = lm.init(jax.random.PRNGKey(0), pair)
  logits = lm.apply(params, pair)
  chex.assert_shape(logits, (2, 2, LENGTH, VOCAB))
  chex.assert_trees_all_close(logits.reshape(4, LENGTH, VOCAB),
                              lm.apply(params, pair.reshape(4, LENGTH)), atol=1e-6)
  dual = _model('lra_dual_encoder', classes=2).init(jax.random.PRNGKey(0), pair)['params']
  chex.assert_trees_all_equal_shapes_and_dtypes(params['params']['encoder'], dual['encoder'])


def _per_position_loss(logits, tokens):
  """-log p(token t + 1 | positions <= t) at every position whose next token is real, else 0."""
  targets = masking.next_tokens(np.asarray(tokens))
  log_p = jax.nn.log_softmax(logits.astype(jnp.float32))
  picked = jnp.take_along_axis(log_p, jnp.maximum(targets, 0)[..., None], -1)[..., 0]
  return -picked * (targets >= 0)


@pytest.mark.parametrize('family', CAUSAL_FAMILIES)
def test_outputs_up_to_t_ignore_every_token_after_t(family):
  """Causality of the whole model: the logits and the loss at positions <= t are unchanged when
  the tokens after t are redrawn (other real ids) or made padding, and the later logits do
  change (not vacuous). The loss at t reads token t + 1 as its target, so it is compared up to
  t - 1."""
  lm = _model('lra_causal_lm', family)
  tokens = _tokens(2, (3, LENGTH), [LENGTH, 18, 11])
  params = lm.init(jax.random.PRNGKey(0), jnp.asarray(tokens))
  logits = lm.apply(params, jnp.asarray(tokens))
  loss = _per_position_loss(logits, tokens)
  for t in (4, 9, 16):
    later = np.arange(LENGTH) > t
    redrawn = np.where(later & (tokens != 0), _tokens(3 + t, tokens.shape, [LENGTH] * 3), tokens)
    padded = np.where(later, 0, tokens)
    for changed, what in ((redrawn, 'redrawn'), (padded, 'padding')):
      other = lm.apply(params, jnp.asarray(changed))
      up_to_t = np.broadcast_to((~later)[None, :, None], logits.shape)
      testing.assert_close('causal', other, logits, atol=1e-5, rtol=1e-5, where=up_to_t,
                           what=f'{family}, tokens after {t} {what}: ')
      before_t = np.arange(LENGTH)[None, :] < t
      testing.assert_close('causal', _per_position_loss(other, changed), loss, atol=1e-5,
                           rtol=1e-5, where=before_t, what=f'{family} loss, after {t} {what}: ')
    moved = np.abs(np.asarray(lm.apply(params, jnp.asarray(redrawn)) - logits))[:, later]
    assert moved.max() > 1e-3, f'{family}: logits after {t} did not change (vacuous check)'


def test_bidirectional_encoder_is_not_causal():
  """The check above is not vacuous for the encoder itself: without causal=True, an early
  position's features do read later tokens."""
  lm = _model('lra_masked_lm', vocab=VOCAB + 1, classes=VOCAB + 1)
  tokens = _tokens(4, (1, LENGTH), [LENGTH])
  params = lm.init(jax.random.PRNGKey(0), jnp.asarray(tokens))
  changed = tokens.copy()
  changed[0, -1] = changed[0, -1] % (VOCAB - 1) + 1
  first = lambda ids: np.asarray(lm.apply(params, jnp.asarray(ids)))[0, 0]
  assert np.abs(first(changed) - first(tokens)).max() > 1e-4


def test_summed_loss_is_the_brute_force_cross_entropy_of_the_real_next_tokens():
  lm = _model('lra_causal_lm', 'linear')
  lengths = [LENGTH, 13, 1, 7]
  tokens = _tokens(5, (4, LENGTH), lengths)
  params = lm.init(jax.random.PRNGKey(0), jnp.asarray(tokens))
  logits = lm.apply(params, jnp.asarray(tokens))
  weights = jnp.array([1.0, 1.0, 1.0, 0.0])             # the last example pads the batch
  sums = get_task('next_tokens').sums(logits, jnp.asarray(masking.next_tokens(tokens)), weights)
  # Brute force: a float64 log-softmax per scored position, target = the next token itself.
  z = np.asarray(logits, np.float64)
  loss, correct, count = 0.0, 0, 0
  for b, n in enumerate(lengths[:3]):
    for t in range(n - 1):                              # position t predicts token t + 1 < n
      row = z[b, t]
      loss += np.log(np.exp(row - row.max()).sum()) + row.max() - row[tokens[b, t + 1]]
      correct += int(row.argmax() == tokens[b, t + 1])
      count += 1
  assert count == (LENGTH - 1) + 12 + 0                 # padding and the padding example excluded
  np.testing.assert_allclose(float(sums['loss']), loss, rtol=1e-5)
  assert float(sums['count']) == count and float(sums['correct']) == correct
  assert float(sums['examples']) == 3.0
  summary = get_task('next_tokens').summary(jax.tree.map(float, sums))
  assert summary['loss'] == pytest.approx(loss / count, rel=1e-5)
  assert summary['accuracy'] == pytest.approx(correct / count)


@pytest.mark.parametrize('family', ['ponet', 'adamra'])
def test_a_mixer_without_a_causal_form_is_refused_when_the_model_is_built(family):
  mixer = FAMILIES[family][0]
  expected = (rf"^mixer '{mixer}' \(\w+\) cannot run causally .*the mixers with a causal form: "
              + re.escape(f'{causal_mixers()}.') + '$')
  with pytest.raises(ValueError, match=expected) as error:
    _model('lra_causal_lm', family)
  assert '\n' not in str(error.value)
  assert {'softmax', 'linear', 'contextpool'} <= set(causal_mixers())
  assert 'ponet' not in causal_mixers() and 'adamra' not in causal_mixers()


# ---------------------------------------------------------------------------------- config

@pytest.mark.parametrize('task', ['lra_listops', 'lra_text', 'lra_retrieval', 'lra_image',
                                  'lra_pathfinder'])
def test_spt_causal_word_changes_only_the_objective(task):
  module = importlib.import_module(task)
  plain, spt = module.get_config('transformer'), module.get_config('transformer,spt_causal')
  masked = module.get_config('transformer,spt')
  assert spt.model.name == 'lra_causal_lm' and spt.data.next_tokens is True
  assert spt.data.mask_rate == 0.0 and plain.data.next_tokens is False
  assert spt.final_test is False
  assert {k for k in plain.keys() if plain[k] != spt[k]} == {'model', 'data', 'final_test'}
  assert {k for k in plain.model.keys() if plain.model[k] != spt.model[k]} == {'name'}
  assert {k for k in plain.data.keys() if plain.data[k] != spt.data[k]} == {'next_tokens'}
  assert {k for k in masked.keys() if masked[k] != spt[k]} == {'model', 'data'}


# --------------------------------------------------------------------- end to end, tiny

def test_init_from_a_causal_pretraining_into_the_bidirectional_classifier(data_dir, tmp_path):
  """A tiny spt_causal run through the trainer, then the task's classifier fine-tuned from its
  best checkpoint: every encoder parameter is read unchanged (lr 0 here), the head is fresh."""
  from poolformers_jax.config import keys as config_keys
  from poolformers_jax.train import train_and_evaluate
  from poolformers_jax.trainer.init_from import read_variables
  pre_dir, ft_dir = str(tmp_path / 'pre'), str(tmp_path / 'ft')
  config = config_keys.override(importlib.import_module('lra_listops').get_config(
      'transformer,tiny,spt_causal'), **tiny_runs.tiny_overrides(data_dir))
  pre = train_and_evaluate(config, pre_dir)
  assert pre.status == 'finished' and pre.test is None
  assert 0 < pre.validation['count'] and np.isfinite(pre.validation['loss'])
  assert 0.0 <= pre.validation['accuracy'] <= 1.0
  pretrained = read_variables(pre_dir)['params']
  assert set(pretrained) == {'encoder', 'lm_head'}
  finetune = tiny_runs.tiny_config(data_dir, **{
      'init_from': pre_dir, 'init_from_allow_missing': '^head/', 'num_train_steps': 2,
      'eval_every_steps': 2, 'checkpoint_every_steps': 2, 'optimizer.learning_rate': 0.0})
  assert finetune.model.name == 'lra_encoder'
  result = train_and_evaluate(finetune, ft_dir)
  assert result.status == 'finished' and result.test is not None
  tuned = read_variables(ft_dir)['params']
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, tuned['encoder']),
                              jax.tree.map(np.asarray, pretrained['encoder']))
  assert set(tuned) == {'encoder', 'head'}


def test_reproduce_picks_the_objective_and_refuses_mixers_without_a_causal_form(tmp_path):
  stages = lra.spt_stages('listops', 'linear', 'tiny', 0, str(tmp_path), objective='causal')
  (pre_words, pre_dir, _), (words, _, ft_set) = stages
  assert pre_words == 'linear,spt_causal' and words == 'linear'
  assert f'init_from={pre_dir}' in ft_set
  assert lra.spt_dir('w', 'listops', 'linear', 1, 'causal').endswith('spt_causal_seed1')
  assert lra.spt_dir('w', 'listops', 'linear', 1).endswith('/spt_seed1')
  with pytest.raises(ValueError, match=r"mixer 'ponet' \(PoNet\) cannot run causally"):
    lra.check_configs(['listops'], ['transformer', 'ponet'], 'tiny', [], spt=True,
                            objective='causal')
  lra.check_configs(['listops'], ['ponet'], 'tiny', [], spt=True)   # masked: fine
  with pytest.raises(SystemExit):
    reproduce.command(['lra', '--task', 'listops', '--spt', '--spt_objective', 'next',
                    '--workdir', str(tmp_path), '--dry_run'])


def test_reproduce_dry_run_lists_the_objective(data_dir, tmp_path, capsys):
  sets = [f'{k}={v}' for k, v in tiny_runs.tiny_overrides(data_dir).items()
          if k.startswith('data.')]
  argv = ['lra', '--task', 'listops', '--families', 'linear', '--size', 'tiny', '--spt',
          '--workdir', str(tmp_path), '--dry_run', *[x for s in sets for x in ('--set', s)]]
  assert reproduce.command(argv + ['--spt_objective', 'causal']) is None
  lines = capsys.readouterr().out.splitlines()
  assert any(line.startswith('listops/linear seed 0 self-pretraining (next tokens): to train')
             and line.endswith('linear/spt_causal_seed0/pretrain') for line in lines), lines
  reproduce.command(argv)                                   # the default stays masked tokens
  assert 'self-pretraining (masked tokens)' in capsys.readouterr().out
