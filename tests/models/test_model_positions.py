"""config.model.positions on every sequence model: the parameter trees (a table only for
'learned'), what each option computes (no positions = a bag of tokens; rotary = relative), the
one-line refusals (a mixer without rotary, another run's positions on resume / eval / init_from),
the LRA config words of Amos et al.'s recipe, and num_train_epochs."""
import json
import os
import sys

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from poolformers_jax import config as config_lib
from poolformers_jax.config import run_file
from poolformers_jax.config.completion import steps_from_epochs
from poolformers_jax.data import get_dataset_info, settings
from poolformers_jax.models import build_model
from poolformers_jax.models.encoder import LraEncoder
from poolformers_jax.trainer import init_check

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'configs'))
import lra_listops  # noqa: E402

OPTIONS = ('learned', 'sinusoidal', 'rotary', 'none')
TOKENS = jnp.asarray(np.random.default_rng(0).integers(1, 11, (2, 10)), jnp.int32).at[1, 7:].set(0)


def _encoder(name='lra_encoder', **updates):
  cfg = dict(name=name, mixer='softmax', dim=16, num_layers=1, num_heads=2, mlp_dim=16,
             head_hidden_dim=8, vocab_size=12, max_length=10, num_classes=3, dropout_rate=0.0,
             attention_dropout_rate=0.0)
  return build_model(ml_collections.ConfigDict({**cfg, **updates}))


def _shapes(model, inputs):
  return jax.tree_util.tree_map(jnp.shape, jax.eval_shape(
      lambda: model.init(jax.random.PRNGKey(0), inputs))['params'])


@pytest.mark.parametrize('name,table', [('lra_encoder', ('encoder', 'position_embedding')),
                                         ('lra_masked_lm', ('encoder', 'position_embedding')),
                                         ('lra_causal_lm', ('encoder', 'position_embedding'))])
def test_only_learned_positions_have_a_table_and_the_rest_of_the_tree_is_unchanged(name, table):
  learned = _shapes(_encoder(name), TOKENS)
  assert learned == _shapes(_encoder(name, positions='learned'), TOKENS)   # the default
  assert learned[table[0]][table[1]] == {'pos_embedding': (1, 10, 16)}
  without = {**learned, table[0]: {k: v for k, v in learned[table[0]].items() if k != table[1]}}
  for option in ('sinusoidal', 'rotary', 'none'):
    assert _shapes(_encoder(name, positions=option), TOKENS) == without, option


def test_the_other_sequence_models_drop_their_tables_too():
  from poolformers_jax.models.lm import CharTransformerLM
  from poolformers_jax.models.ponet_mlm import PoNetMLM
  from poolformers_jax.models.seq2seq import TransformerSeq2Seq
  lm = dict(vocab_size=12, num_layers=1, emb_dim=16, num_heads=2, mlp_dim=16, max_length=10)
  assert 'pos_embed' in _shapes(CharTransformerLM(**lm, positions='learned'), TOKENS)
  for option in ('sinusoidal', 'rotary', 'none'):
    assert 'pos_embed' not in _shapes(CharTransformerLM(**lm, positions=option), TOKENS)
  bert = dict(vocab_size=12, emb_dim=16, num_layers=1, num_heads=2, mlp_dim=16, max_length=10,
              cls_id=1, sep_id=2, mixer='softmax')
  assert 'position_embed' in _shapes(PoNetMLM(**bert), TOKENS)
  for option in ('sinusoidal', 'rotary', 'none'):
    assert 'position_embed' not in _shapes(PoNetMLM(**bert, positions=option), TOKENS)
  batch = {'inputs': TOKENS, 'targets': TOKENS}
  tree = _shapes(TransformerSeq2Seq(vocab_size=12, num_layers=1, emb_dim=16, num_heads=2,
                                    mlp_dim=16), batch)
  for option in ('rotary', 'none'):
    assert _shapes(TransformerSeq2Seq(vocab_size=12, num_layers=1, emb_dim=16, num_heads=2,
                                      mlp_dim=16, positions=option), batch) == tree


def test_without_positions_the_encoder_reads_a_bag_of_tokens_and_with_them_it_does_not():
  """Softmax attention and mean pooling are permutation invariant: only positions break it."""
  tokens = TOKENS[:1]
  permuted = tokens[:, ::-1]
  for option in OPTIONS:
    model = _encoder(positions=option)
    variables = model.init(jax.random.PRNGKey(0), tokens)
    gap = float(jnp.abs(model.apply(variables, tokens) - model.apply(variables, permuted)).max())
    if option == 'none':
      assert gap < 1e-5
    else:
      assert gap > 1e-4, option


def test_sinusoidal_encoder_adds_the_table_to_the_token_embeddings():
  """The sinusoidal encoder is the 'none' encoder given sqrt(dim) * embeddings + the fixed table,
  the embeddings drawn at std dim^-1/2 (unit scale beside the table, Vaswani et al. Sec. 3.4)."""
  from poolformers_jax.layers.common import sinusoidal_positions
  model = _encoder(positions='sinusoidal', num_layers=0)
  variables = model.init(jax.random.PRNGKey(0), TOKENS)
  table = np.asarray(variables['params']['encoder']['token_embedding']['embedding'])
  assert 0.15 < table.std() < 0.35, table.std()       # 16 ** -0.5 = 0.25, not the LRA code's 0.02
  x = 4.0 * table[np.asarray(TOKENS)] + np.asarray(sinusoidal_positions(jnp.arange(10), 16))
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)   # final_norm (scale 1, bias 0)
  normed = (x - mu) / np.sqrt(var + 1e-6)
  real = np.asarray(TOKENS != 0)[..., None]
  pooled = (normed * real).sum(1) / real.sum(1)
  features = model.apply(variables, TOKENS, capture_intermediates=False,
                         mutable=['intermediates'])[1]['intermediates']['encoder']['pooled'][0]
  chex.assert_trees_all_close(features, pooled.astype(np.float32), atol=2e-5)


def test_rotary_with_a_mixer_that_has_none_is_refused_when_the_model_is_built():
  for name, extra in (('lra_encoder', {'mixer': 'ponet', 'mixer_kwargs': {'segment_num': 2}}),
                      ('ponet_mlm', {'mixer': 'ponet', 'emb_dim': 16, 'cls_id': 1, 'sep_id': 2,
                                     'num_layers': 1, 'mlp_dim': 16})):
    cfg = dict(name=name, vocab_size=12, max_length=10, num_heads=2, positions='rotary', **extra)
    if name == 'lra_encoder':
      cfg.update(num_classes=3)
    with pytest.raises(ValueError, match=r"^mixer 'ponet' \(PoNet\) takes no rotary positions; "):
      build_model(ml_collections.ConfigDict(cfg))   # before anything is traced


def test_a_run_with_other_positions_is_refused_on_resume_and_eval_in_one_line(tmp_path):
  config = config_lib.override(lra_listops.get_config('transformer,tiny'), **{
      'model.vocab_size': 20, 'model.max_length': 48, 'model.num_classes': 10})   # completed
  run_file.save_config(config, str(tmp_path))
  rotary = config_lib.override(config, **{'model.positions': 'rotary'})
  with pytest.raises(run_file.ModelMismatch,
                     match=r'config.json\): model.positions "rotary" \(run: "learned"\); '):
    run_file.with_run_model(rotary, str(tmp_path))
  # A run older than the option trained with learned positions: the default is its model.
  saved = json.loads((tmp_path / 'config.json').read_text())
  del saved['model']['positions']
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  assert run_file.with_run_model(config, str(tmp_path)).model.positions == 'learned'
  with pytest.raises(run_file.ModelMismatch,
                     match=r'model.positions "rotary" \(run: absent, i.e. "learned"\); '):
    run_file.with_run_model(rotary, str(tmp_path))


def test_init_from_a_run_with_other_positions_is_refused_in_one_line(tmp_path):
  run_file.save_config(lra_listops.get_config('transformer,tiny,rotary,spt'), str(tmp_path))
  finetune = config_lib.override(lra_listops.get_config('transformer,tiny,finetune'),
                                 init_from=str(tmp_path))
  with pytest.raises(ValueError, match=r"^config.init_from='.*' trained with model.positions="
                                       r"'rotary', this run has 'learned': .*\.$"):
    init_check.check_init_source(finetune)
  (tmp_path / 'config.json').write_text(json.dumps({'model_type': 'ponet'}))   # a Hugging Face
  init_check.check_init_source(finetune)                                        # folder: no run


def test_amos_words_are_their_recipe_per_stage():
  spt = lra_listops.get_config('transformer,spt,amos,rotary,6x512')
  assert (spt.model.name, spt.model.positions, spt.model.dropout_rate,
          spt.model.attention_dropout_rate) == ('lra_masked_lm', 'rotary', 0.0, 0.0)
  assert (spt.model.num_layers, spt.model.dim, spt.model.num_heads, spt.model.mlp_dim) == (
      6, 512, 8, 2048)
  assert (spt.optimizer.schedule, spt.optimizer.learning_rate, spt.optimizer.warmup_steps,
          spt.num_train_epochs) == ('constant', 1e-3, 2000, 100)
  ft = lra_listops.get_config('transformer,finetune,amos')
  assert (ft.model.name, ft.optimizer.learning_rate, ft.model.dropout_rate, ft.model.pooling,
          ft.init_from_refuse_unlearned, ft.num_train_epochs) == (
              'lra_encoder', 1e-4, 0.1, 'mean', True, 0)
  causal = lra_listops.get_config('transformer,spt_causal,amos')
  assert (causal.model.name, causal.optimizer.learning_rate) == ('lra_causal_lm', 5e-4)
  ft_causal = lra_listops.get_config('transformer,finetune_causal,amos')
  assert (ft_causal.model.pooling, ft_causal.optimizer.learning_rate) == ('last', 5e-4)
  with pytest.raises(ValueError, match=r"^config word 'amos' is Amos et al.'s self-pretraining "
                                       r"schedule: add a stage word, .*\.$"):
    lra_listops.get_config('transformer,amos')


def test_epochs_become_steps_from_the_training_split():
  config = lra_listops.get_config('transformer,small,spt,amos')
  info = type('Info', (), {'name': 'listops', 'split_sizes': {'train': 20000}})()
  config = config_lib.override(config, num_train_epochs=2.5)
  steps_from_epochs(config, info)
  assert config.num_train_steps == 782   # ceil(2.5 * 20000 / 64)
  info.split_sizes = {}
  with pytest.raises(ValueError, match=r'^config.num_train_epochs=2.5 needs the size of the '):
    steps_from_epochs(config, info)


def test_last_token_pooling_reads_each_row_at_its_last_real_token():
  model = LraEncoder(vocab_size=12, max_length=10, num_classes=3, dim=16, num_layers=1,
                     num_heads=2, mlp_dim=16, pooling='last', causal=True)
  variables = model.init(jax.random.PRNGKey(0), TOKENS)
  _, state = model.apply(variables, TOKENS, mutable=['intermediates'])
  pooled = state['intermediates']['encoder']['pooled'][0]
  none = model.clone(pooling='none')
  _, every = none.apply(variables, TOKENS, mutable=['intermediates'])
  features = every['intermediates']['encoder']['pooled'][0]
  chex.assert_trees_all_close(pooled, jnp.stack([features[0, 9], features[1, 6]]))


def test_a_finetune_stage_without_its_pre_training_run_is_one_line():
  config = config_lib.complete(lra_listops.get_config('transformer,tiny,finetune'),
                               need_files=False)
  info = get_dataset_info(settings(config.data), need_files=False)
  with pytest.raises(config_lib.ConfigError, match=r'^a fine-tuning stage \(config.init_from_'
                                                   r'refuse_unlearned\) needs the pre-training '
                                                   r'run it starts from'):
    config_lib.check_config(config, info, devices=1)
