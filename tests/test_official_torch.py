"""benchmarks/official_torch.py without torch: our side of the comparison is the official LRA text
model's size (parameter count by the formula of its layers from its lra_config.py dims, and the
count torch printed for it), the batch is the LRA text batch, and XLA_FLAGS stay as given."""
import os

import jax
import numpy as np
import pytest

from poolformers_jax.train.setup import make_setup
from sized_models import load_benchmark

# lxchtan/PoNet examples/LRA/code/lra_config.py, config['text']['model'].
OFFICIAL_TEXT = dict(embedding_dim=64, transformer_dim=64, transformer_hidden_dim=128,
                     head_dim=32, num_head=2, num_layers=2, vocab_size=512, max_seq_len=4000,
                     num_classes=2)
# sum(p.numel()) of their ModelForSC for that config (torch 2.13.0+cpu, counted once, by hand).
TORCH_COUNTS = {'ponet': 387202, 'softmax': 370562}


def param_count(config) -> int:
  params = make_setup(config, need_files=False).abstract_state.params
  return sum(x.size for x in jax.tree_util.tree_leaves(params))


@pytest.mark.parametrize('model', ['ponet', 'softmax'])
def test_our_side_has_the_official_parameter_count(model):
  runner = load_benchmark('official_torch')
  assert runner.official_param_count(OFFICIAL_TEXT, model) == TORCH_COUNTS[model]
  flags_before = os.environ.get('XLA_FLAGS')
  config = runner.our_config(model, 4096, 8, runner.OFFICIAL_VOCAB)
  assert os.environ.get('XLA_FLAGS') == flags_before   # importing efficiency.py changed nothing
  assert config.model.mixer == {'ponet': 'ponet', 'softmax': 'softmax'}[model]
  assert param_count(config) == TORCH_COUNTS[model]
  # The byte data's own vocabulary (257 rows, --our_vocab_size=0): 255 rows of width 64 fewer.
  assert param_count(runner.our_config(model, 4096, 8, 0)) == TORCH_COUNTS[model] - 255 * 64


def test_the_batch_is_lra_text_real_bytes_then_padding():
  ids, labels = load_benchmark('official_torch').example_batch(8, 4096, 4000)
  assert ids.shape == (8, 4096) and ids.dtype == np.int64
  assert (ids[:, 4000:] == 0).all() and ids[:, :4000].min() >= 1 and ids[:, :4000].max() <= 256
  assert len(np.unique(ids[:, :4000])) == 256   # every byte value occurs
  assert labels.tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
