"""train_and_evaluate beyond LRA: a BatchNorm ConvNet on CIFAR (tfds mock data) and a causal char LM
on a tiny enwik8 zip written by the test. These exercise the trainer's `batch_stats` path and the
'lm' task (per-token loss, bits per token) end to end, sharded over the 8 fake devices."""
import json
import math
import os
import zipfile

import cifar
import enwik8
import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from poolformers_jax import config as config_lib, load_run
from poolformers_jax.train import train_and_evaluate

RUN = {'num_train_steps': 2, 'eval_every_steps': 2, 'checkpoint_every_steps': 2,
       'log_every_steps': 1, 'progress_bar': False, 'batch_size': 8, 'eval_batch_size': 8,
       'optimizer.warmup_steps': 1}


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_convnet_with_batchnorm_trains_and_updates_running_stats(tmp_path):
  config = config_lib.override(
      cifar.get_config('convnet_max,cifar10'), **RUN,
      **{'data.data_dir': str(tmp_path / 'data'), 'model.widths': (8, 16),
         'model.convs_per_stage': 1})
  with tfds.testing.mock_data(num_examples=12):
    result = train_and_evaluate(config, str(tmp_path / 'run'))
  assert result.step == 2 and result.status == 'finished'
  # BatchNorm running statistics moved away from their init (mean 0, var 1) during training.
  stats = jax.tree_util.tree_leaves_with_path(result.state.batch_stats)
  means = [np.asarray(v) for p, v in stats if 'mean' in jax.tree_util.keystr(p)]
  assert means and max(float(np.abs(m).max()) for m in means) > 1e-3
  # Exact evaluation: all 12 mock test images counted once (8 + 4 padded-and-masked).
  assert result.test['count'] == 12.0 and math.isfinite(result.test['loss'])
  assert 0.0 <= result.test['accuracy'] <= 1.0
  # load_run restores the BatchNorm statistics with the parameters; images are uint8 [H, W, 3].
  run = load_run(str(tmp_path / 'run'), checkpoint='latest')
  assert jax.tree.structure(run.batch_stats) == jax.tree.structure(result.state.batch_stats)
  images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
  logits = run.logits(list(images))
  assert logits.shape == (3, 10)
  np.testing.assert_array_equal(run.predict(list(images)), logits.argmax(-1))


def test_char_lm_trains_with_per_token_loss_and_bits(tmp_path):
  rng = np.random.default_rng(0)
  text = bytes(rng.integers(97, 101, 3000, dtype=np.uint8))   # 4 symbols: ~ln 4 nats when learned
  os.makedirs(tmp_path / 'data')
  with zipfile.ZipFile(tmp_path / 'data' / 'enwik8.zip', 'w') as archive:
    archive.writestr('enwik8', text)
  config = config_lib.override(
      enwik8.get_config('tiny'), **RUN,
      **{'data.data_dir': str(tmp_path / 'data'), 'data.split_sizes': (2000, 500, 500),
         'data.max_length': 32, 'model.emb_dim': 32, 'model.mlp_dim': 32,
         'model.num_heads': 2, 'model.num_layers': 1})
  result = train_and_evaluate(config, str(tmp_path / 'run'))
  assert result.status == 'finished'
  # 500 test bytes -> (500 - 1) // 32 = 15 windows of 32 predicted tokens each.
  assert result.test['count'] == 15 * 32
  np.testing.assert_allclose(result.test['bits_per_token'], result.test['loss'] / math.log(2),
                             rtol=1e-6)
  first = next(m for m in _metrics(tmp_path / 'run') if m['split'] == 'train')
  # Untrained logits over the whole byte vocabulary: the loss is far above ln 4, the entropy of
  # the text, so the loss is really averaged over vocabulary-sized predictions per token.
  assert first['step'] == 1 and first['loss'] > math.log(4) + 1.0
  # load_run: the next-symbol distribution after a text; causal, so the symbols (or the
  # padding) after position t never change it.
  run = load_run(str(tmp_path / 'run'), checkpoint='latest')
  probabilities = run.predict(['abca', 'b'])
  assert probabilities.shape == (2, 257)
  np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)
  logits = run.logits(['abca', 'abcadddd'])
  np.testing.assert_allclose(logits[0, 3], logits[1, 3], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(probabilities[0], np.asarray(jax.nn.softmax(logits[0, 3])),
                             rtol=1e-5, atol=1e-7)
  assert np.abs(logits[0, 3] - logits[0, 0]).max() > 1e-4   # a position is its own prediction
  with pytest.raises(ValueError, match=r"^input 0: text has 40 symbols > "
                     r"config.data.max_length=32, too long"):
    run.predict(['a' * 40])
  np.testing.assert_allclose(run.predict(['b' * 8 + 'abca' * 8], too_long='truncate'),
                             run.predict(['abca' * 8]), rtol=1e-5, atol=1e-7)
