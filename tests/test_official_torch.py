"""benchmarks/official_torch.py without torch: our side of the comparison is the official LRA text
model's size (parameter count by the formula of its layers from its lra_config.py dims, and the
count torch printed for it), the batch is the LRA text batch, and XLA_FLAGS stay as given. With
torch (where an interpreter has it): the --device code path of `gpu_run.sh peer`, on the CPU."""
import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from sized_models import load_benchmark

from poolformers_jax.trainer.setup import make_setup

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


# ---- the GPU mode's code path, run on the CPU (benchmarks/gpu_run.sh peer) -----------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A stand-in for their examples/LRA/code where no copy is at hand: lra_config's 'text' entry and
# a ModelForSC with their forward signature, outputs and autocast switch.
FAKE_OFFICIAL = {
    'lra_config.py': '''
config = {'text': {
    'model': dict(embedding_dim=64, transformer_dim=64, transformer_hidden_dim=128, head_dim=32,
                  num_head=2, num_layers=2, vocab_size=512, max_seq_len=4000, num_classes=2),
    'training': dict(batch_size=32, learning_rate=1e-4, warmup=8000, lr_decay='linear',
                     weight_decay=0, num_train_steps=20000),
    'extra_attn_config': {'ponet': {'segment_num': 4096}, 'softmax': {}}}}
''',
    'model_wrapper.py': '''
import torch
class ModelForSC(torch.nn.Module):
  def __init__(self, config):
    super().__init__()
    self.enable_amp = config['mixed_precision']
    self.embed = torch.nn.Embedding(config['vocab_size'], config['transformer_dim'])
    self.head = torch.nn.Linear(config['transformer_dim'], config['num_classes'])
  def forward(self, input_ids_0, mask_0, label):
    with torch.cuda.amp.autocast(enabled=self.enable_amp):
      x = (self.embed(input_ids_0) * mask_0[..., None]).mean(1)
      scores = self.head(x)
      return {'loss': torch.nn.CrossEntropyLoss(reduction='none')(scores, label),
              'accu': (scores.argmax(-1) == label).float()}
''',
    'model.py': '', 'attention.py': '', 'attention_ponet.py': ''}


def torch_python():
  """An interpreter with torch and numpy: $TORCH_PYTHON, the venv docs/results/ponet_speed.md
  uses, or this one; None when none has them."""
  for python in (os.environ.get('TORCH_PYTHON'), '/tmp/torchvenv/bin/python',
                 '/work/torchvenv/bin/python', sys.executable):
    if python and os.path.exists(python) and subprocess.run(
        [python, '-c', 'import torch, numpy'], capture_output=True).returncode == 0:
      return python
  return None


def official_dir(tmp_path) -> tuple[str, bool]:
  """(their code: $PONET_OFFICIAL_DIR or .official/ponet_lra_code, else the stand-in; real?)"""
  real = os.environ.get('PONET_OFFICIAL_DIR') or os.path.join(ROOT, '.official', 'ponet_lra_code')
  if all(os.path.isfile(os.path.join(real, f)) for f in FAKE_OFFICIAL):
    return real, True
  fake = tmp_path / 'official'
  fake.mkdir()
  for name, text in FAKE_OFFICIAL.items():
    (fake / name).write_text(text)
  (fake / 'COMMIT').write_text('0123abc\n')
  return str(fake), False


def run_runner(args, timeout=900):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'official_torch.py')]
                        + args, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_device_mode_runs_the_scaler_step_and_our_bf16_step_on_cpu(tmp_path):
  """--device cpu is --device cuda's code (DataParallel, GradScaler calls, synchronised timing,
  peak memory fields, our dtype variants); the side-by-side table has its columns."""
  python = torch_python()
  if python is None:
    pytest.skip('no interpreter with torch (set TORCH_PYTHON)')
  official, real = official_dir(tmp_path)
  proc = run_runner([f'--official_dir={official}', f'--torch_python={python}',
                     f'--output_dir={tmp_path}', '--output_name=gpu_peer', '--device=cpu',
                     '--models=ponet', '--batch=2', '--length=64', '--real_tokens=50',
                     '--rounds=1', '--warmup=1', '--steps=2', '--our_precisions=bfloat16',
                     '--our_xla_flags=inherit'])
  assert proc.returncode == 0, proc.stderr[-3000:]
  record = json.loads((tmp_path / 'gpu_peer.json').read_text())['models']['ponet']
  assert list(record['runs']) == ['official', 'ours ponet bfloat16']
  official_run = record['runs']['official'][0]
  assert official_run['status'] == 'ok', official_run
  assert official_run['precision'] == 'float32' and official_run['device'] == 'cpu'
  assert official_run['peak_bytes'] is None and len(official_run['wall_ms']) == 2
  assert math.isfinite(official_run['loss_after'])
  assert official_run['dims']['mixed_precision'] is False   # amp only with CUDA
  ours = record['runs']['ours ponet bfloat16'][0]
  assert ours['status'] == 'ok', ours
  assert ours['precision'] == 'bfloat16' and ours['entry'] == 'ponet'
  assert ours['compiled_bytes'] > 0 and len(ours['wall_ms']) == 2
  assert record['setup']['device'] == 'cpu' and record['setup']['rounds_done'] == 1
  if real:   # their model: the same parameter count as ours
    assert record['param_counts'] == {'official': TORCH_COUNTS['ponet'],
                                      'ours ponet bfloat16': TORCH_COUNTS['ponet']}
  else:
    assert record['setup']['official_commit'] == '0123abc'
  table = (tmp_path / 'gpu_peer.md').read_text()
  assert ('| model | precision | official ms | ours ms | ratio | official peak GiB | '
          'ours peak GiB | card | commit |') in table
  summary = record['summary']
  row = next(l for l in table.splitlines() if l.startswith('| ponet | bfloat16 vs float32 |'))
  cells = [c.strip() for c in row.strip('|').split('|')]
  assert len(cells) == 9 and cells[5] == cells[6] == '-'   # no device peak on a CPU
  assert cells[2] == f'{summary["official"]["wall_ms"]:.2f}'
  assert cells[3] == f'{summary["ours ponet bfloat16"]["wall_ms"]:.2f}'
  ratio = summary['official']['wall_ms'] / summary['ours ponet bfloat16']['wall_ms']
  assert cells[4] == f'{ratio:.2f}x' and cells[8] == record['setup']['commit']


def test_budget_spent_leaves_every_process_unstarted_and_the_table_written(tmp_path):
  """--budget_s: no process starts that cannot finish; our side alone with --torch_python none;
  cuDNN variants only in bf16."""
  proc = run_runner(['--official_dir=/nonexistent', '--torch_python=none',
                     f'--output_dir={tmp_path}', '--output_name=gpu_peer', '--models=softmax',
                     '--our_precisions=bfloat16,float32', '--our_impls=xla,cudnn', '--rounds=2',
                     '--our_xla_flags=inherit', '--budget_s=0.5'], timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  record = json.loads((tmp_path / 'gpu_peer.json').read_text())['models']['softmax']
  assert list(record['runs']) == ['ours softmax/xla bfloat16', 'ours softmax/cudnn bfloat16',
                                  'ours softmax/xla float32']
  assert all([r['status'] for r in runs] == ['not run: budget spent'] * 2
             for runs in record['runs'].values())
  table = (tmp_path / 'gpu_peer.md').read_text()
  assert '| softmax/cudnn (not run: budget spent) | bfloat16 vs ? | - | - | - |' in table
