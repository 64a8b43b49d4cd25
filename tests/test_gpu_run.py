"""The CPU side of `bash benchmarks/gpu_run.sh listops` (the ListOps column on one GPU, resumable
in calls of at most ten minutes): a call trains the unfinished families and packs the run
directories; the next call, given that pack, restores them, skips what finished and adds the
rest; the column lists every family with its test accuracy. Tiny sizes, this machine's python."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _call(tmp_path, name, families, state=None, heldout=True):
  out, runs = tmp_path / name, tmp_path / f'{name}_runs'
  env = dict(os.environ, OUT=str(out), LISTOPS_RUNS=str(runs), LISTOPS_FAMILIES=families,
             LISTOPS_HELDOUT='1' if heldout else '0',
             LISTOPS_SIZE='tiny', LISTOPS_INSTALL='0', PYTHON=sys.executable,
             LISTOPS_STATE=str(state or tmp_path / 'none'), JAX_PLATFORMS='cpu',
             LISTOPS_ARGS=f'--config.data.data_dir={tmp_path / "data"}',
             LISTOPS_HELDOUT_ARGS='--min_tokens 10 --max_tokens 40 --exclude_num_train 256')
  proc = subprocess.run(['bash', 'benchmarks/gpu_run.sh', 'listops'], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr
  return out, proc.stdout


def _member(out, path):
  for tar_path in sorted(out.glob('listops_*.tar')):
    with tarfile.open(tar_path) as pack:
      if path in pack.getnames():
        return pack.extractfile(path).read()
  raise KeyError(path)


def _test_accuracy(out, family):
  return json.loads(_member(out, f'{family}/eval/test.json'))['accuracy']


def _log(out, family):
  return _member(out, f'{family}/train.log').decode()


def test_listops_column_resumes_across_calls_from_its_pack(tmp_path):
  first, column = _call(tmp_path, 'call1', 'linear')
  assert sorted(p.name for p in first.iterdir()) == ['listops.md', 'listops_0.tar']
  linear = _test_accuracy(first, 'linear')
  assert '| linear | 20 |' in column and f'{100 * linear:.2f} |' in column
  heldout = json.loads(_member(first, 'linear/heldout.json'))     # best checkpoint, seed-1 trees
  assert heldout['step'] == json.loads(_member(first, 'linear/eval/test.json'))['step']
  assert heldout['count'] == 2000 and heldout['data_changes']['data.source'] == 'tsv'
  assert f'{100 * linear:.2f} | {100 * heldout["accuracy"]:.2f} |' in column
  with tarfile.open(first / 'listops_0.tar') as pack:
    names = pack.getnames()
  assert not any('tensorboard' in n for n in names)          # the pack carries no logs of TB
  assert any(n.startswith('linear/best/') for n in names)    # finished: the best checkpoint,
  assert not any(n.startswith('linear/checkpoints/') for n in names)   # not the resume ones
  first_log = _log(first, 'linear')
  assert first_log
  # Config words name a run (directory 'ponet-reference'); it trains beside nothing finished.
  # (the held-out evaluation is the first call's to test: skipped here, to keep the test short)
  second, column = _call(tmp_path, 'call2', 'linear ponet,reference', state=first, heldout=False)
  assert _log(second, 'linear') == first_log                # finished: not trained again
  run_config = json.loads(_member(second, 'ponet-reference/config.json'))
  assert run_config['model']['mixer'] == 'ponet' and run_config['param_init'] == 'torch'
  assert _test_accuracy(second, 'linear') == linear         # restored from the first pack
  ponet = _test_accuracy(second, 'ponet-reference')
  rows = [line for line in column.splitlines() if line.startswith('| linear') or
          line.startswith('| ponet,reference')]
  assert len(rows) == 2 and f'{100 * ponet:.2f} |' in rows[1]


def test_pack_splits_runs_under_the_limit_and_keeps_resume_checkpoints_of_unfinished(tmp_path):
  sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
  import listops_column   # pylint: disable=g-import-not-at-top
  runs = tmp_path / 'runs'
  for name, finished in (('a', True), ('b-reference', False)):
    for sub in ('best', 'checkpoints', 'averaged', 'tensorboard'):
      (runs / name / sub).mkdir(parents=True)
      (runs / name / sub / 'blob').write_bytes(b'x' * 40_000)
    if finished:
      (runs / name / 'eval').mkdir()
      (runs / name / 'eval' / 'test.json').write_text('{"accuracy": 0.5}')
  paths = listops_column.pack(str(runs), ['a', 'b,reference', 'missing'], str(tmp_path / 'out'),
                              limit=150_000)
  assert [os.path.basename(p) for p in paths] == ['listops_0.tar', 'listops_1.tar']
  names = [sorted(tarfile.open(p).getnames()) for p in paths]
  assert names[0] == ['a/best/blob', 'a/eval/test.json']
  assert names[1] == ['b-reference/averaged/blob', 'b-reference/best/blob',
                      'b-reference/checkpoints/blob']
  with pytest.raises(ValueError, match='b-reference needs'):
    listops_column.pack(str(runs), ['b,reference'], str(tmp_path / 'out2'), limit=100_000)


def test_self_pretrained_families_pretrain_then_fine_tune_from_their_best_checkpoints(tmp_path):
  """One call, both objectives: `linear,spt` (masked tokens) and `transformer,spt_causal`; beside
  them rotary positions from scratch and rotary masked SPT with Amos et al.'s recipe (words
  `spt,amos`, then `finetune,amos`: lr 1e-4, constant), whose fine-tuning refuses the tiny
  20-step pre-training as still at its data's unigram rate."""
  out, column = _call(tmp_path, 'spt', 'linear,spt transformer,spt_causal transformer,rotary '
                      'transformer,rotary,spt,amos', heldout=False)
  pretrain = json.loads(_member(out, 'linear-spt/pretrain/config.json'))
  assert pretrain['model']['name'] == 'lra_masked_lm' and pretrain['data']['mask_rate'] == 0.1
  finetune = json.loads(_member(out, 'linear-spt/config.json'))
  assert finetune['model']['name'] == 'lra_encoder' and finetune['data']['mask_rate'] == 0.0
  assert finetune['init_from'].endswith('linear-spt/pretrain')
  log = _log(out, 'linear-spt')
  # The encoder came from the pre-training (its [MASK] row dropped); the head is new.
  assert 'encoder/token_embedding/embedding (19, 32) -> (18, 32)' in log
  assert 'freshly initialised (not taken from the checkpoint): head/' in log
  assert 0.0 <= _test_accuracy(out, 'linear-spt') <= 1.0
  masked = max(json.loads(line)['accuracy'] for line in
               _member(out, 'linear-spt/pretrain/metrics.jsonl').decode().splitlines()
               if json.loads(line).get('split') == 'validation')
  assert f'| linear,spt (pre-trained 20 steps, masked tokens {100 * masked:.2f} % at' in column
  with tarfile.open(out / 'listops_0.tar') as pack:
    names = pack.getnames()
  # Fine-tuning started: the pre-training's resume checkpoints stay behind, its best comes back.
  assert any(n.startswith('linear-spt/pretrain/best/') for n in names)
  assert not any(n.startswith('linear-spt/pretrain/checkpoints/') for n in names)
  # Next tokens: causal pre-training, then the classifier reads the token table as it is.
  pretrain = json.loads(_member(out, 'transformer-spt_causal/pretrain/config.json'))
  assert pretrain['model']['name'] == 'lra_causal_lm' and pretrain['data']['next_tokens']
  finetune = json.loads(_member(out, 'transformer-spt_causal/config.json'))
  assert finetune['model']['name'] == 'lra_encoder' and not finetune['data']['next_tokens']
  assert finetune['init_from'].endswith('transformer-spt_causal/pretrain')
  log = _log(out, 'transformer-spt_causal')
  assert 'freshly initialised (not taken from the checkpoint): head/' in log
  assert 'encoder/token_embedding/embedding (' not in log      # no row dropped or resized
  assert 0.0 <= _test_accuracy(out, 'transformer-spt_causal') <= 1.0
  assert '| transformer,spt_causal (pre-trained 20 steps, next tokens ' in column
  scratch = json.loads(_member(out, 'transformer-rotary/config.json'))
  assert scratch['model']['positions'] == 'rotary' and scratch['model']['name'] == 'lra_encoder'
  assert 0.0 <= _test_accuracy(out, 'transformer-rotary') <= 1.0
  pretrain = json.loads(_member(out, 'transformer-rotary-spt-amos/pretrain/config.json'))
  assert (pretrain['model']['name'], pretrain['model']['positions'],
          pretrain['model']['dropout_rate'], pretrain['optimizer']['schedule'],
          pretrain['optimizer']['learning_rate']) == ('lra_masked_lm', 'rotary', 0.0,
                                                      'constant', 1e-3)
  log = _log(out, 'transformer-rotary-spt-amos')
  assert 'is a pre-training run whose best validation accuracy' in log
  assert '--config.init_from_refuse_unlearned=False to fine-tune from it anyway.' in log
  assert '| transformer,rotary |' in column and '| transformer,rotary,spt,amos' in column


def test_peer_mode_runs_end_to_end_on_cpu_within_its_budget(tmp_path):
  """`gpu_run.sh peer` with tiny sizes on the CPU: the side by side (here without torch: one line
  says so and our side runs alone), then the sweep in one process with FLOP/s columns, the cuDNN
  check skipped for want of time; at most the five files the device tool brings back."""
  out, official = tmp_path / 'out', tmp_path / 'official'
  official.mkdir()
  (official / 'model_wrapper.py').write_text('')   # their code "present": the torch check next
  env = dict(os.environ, OUT=str(out), PEER_INSTALL='0', PYTHON=sys.executable,
             PEER_OFFICIAL_DIR=str(official),
             PEER_DEVICE='cpu', JAX_PLATFORMS='cpu', PEER_BUDGET_S='500',
             PEER_TORCH_PYTHON=str(tmp_path / 'no_torch_here'), PEER_MODELS='ponet',
             PEER_TORCH_BATCH='2', PEER_LENGTH='64', PEER_REAL_TOKENS='50', PEER_WARMUP='1',
             PEER_STEPS='1', PEER_ROUNDS='1', PEER_MIXERS='softmax/xla,none',
             PEER_LENGTHS='32', PEER_BATCH='2', PEER_REPEATS='1', PEER_CHECK_S='100000',
             PEER_JAX_CACHE=str(tmp_path / 'cache'))
  proc = subprocess.run(['bash', 'benchmarks/gpu_run.sh', 'peer'], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr
  peer = out / 'peer'
  assert sorted(p.name for p in peer.iterdir()) == [
      'efficiency.json', 'efficiency.md', 'gpu_peer.json', 'gpu_peer.md', 'log.txt']
  log = (peer / 'log.txt').read_text()
  assert 'cannot import torch: our side only' in log and 'check_cudnn not run' in log
  record = json.loads((peer / 'gpu_peer.json').read_text())['models']['ponet']
  assert list(record['runs']) == ['ours ponet bfloat16', 'ours ponet float32']
  assert all(runs[0]['status'] == 'ok' for runs in record['runs'].values()), record['runs']
  table = (peer / 'gpu_peer.md').read_text()
  assert '| ponet | bfloat16 vs ? | - |' in table and '| ponet | float32 vs ? | - |' in table
  sweep = json.loads((peer / 'efficiency.json').read_text())
  assert sweep['setup']['dtype'] == 'bfloat16' and sweep['setup']['isolated'] is False
  assert sweep['setup']['peak_bf16_flops'] is None            # a CPU: no peak, no fraction
  assert sorted(sweep['results']) == ['none', 'softmax/xla']
  for entry, per_length in sweep['results'].items():
    point = per_length['32']
    assert point['status'] == 'ok' and point['step_flops'] > 0, (entry, point)
    assert point['flops_used'] == max(point['step_flops'], 3e9 * point['forward_gflops'])
    assert point['flops_per_s'] == pytest.approx(point['flops_used'] / (point['step_ms'] / 1e3))
    assert point['peak_fraction'] is None and point['flops_from'] in ('compiled step', '3 x forward')
  # The lower bound skips the [L, L] products: fewer flops per step than softmax.
  assert sweep['results']['none']['32']['step_flops'] < sweep['results']['softmax/xla']['32'][
      'step_flops']
  assert '**achieved TFLOP/s' in (peer / 'efficiency.md').read_text()


def test_listops_column_names_a_runs_tokenizer(tmp_path):
  sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
  import listops_column   # pylint: disable=g-import-not-at-top
  for name, data in (('adamra', {'tokenizer': 'alphanumeric'}), ('ponet', {}), ('linear', None)):
    os.makedirs(tmp_path / name)
    if data is not None:
      (tmp_path / name / 'config.json').write_text(json.dumps({'data': data}))
  rows = [listops_column.row(str(tmp_path), f) for f in ('adamra', 'ponet', 'linear')]
  assert [r['tokenizer'] for r in rows] == ['alphanumeric', 'brackets', 'brackets']
  lines = listops_column.markdown(rows).splitlines()[2:]
  assert lines[0].startswith('| adamra (tokenizer alphanumeric) | 0 |')
  assert lines[1].startswith('| ponet | 0 |') and lines[2].startswith('| linear | 0 |')
