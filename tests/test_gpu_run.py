"""The CPU side of `bash benchmarks/gpu_run.sh` (the GPU jobs, resumable in calls of at most ten
minutes): `queue` runs peer, compile time, the sweep and the ListOps groups (`listops` mode) and
packs their state; the next call, given those files, restores them, skips what finished and adds
the rest. Tiny sizes, this machine's python."""
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def test_pack_splits_runs_under_the_limit_and_keeps_resume_checkpoints_of_unfinished(tmp_path):
  sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
  import listops_column  # pylint: disable=g-import-not-at-top
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


SPT_FAMILIES = 'linear,spt transformer,spt_causal transformer,rotary transformer,rotary,spt,amos'


def _queue(tmp_path, name, state, **env):
  env = dict(os.environ, OUT=str(tmp_path / name), QUEUE_STATE=str(state), QUEUE_INSTALL='0',
             QUEUE_WORK=str(tmp_path / f'{name}_work'), PYTHON=sys.executable, JAX_PLATFORMS='cpu',
             QUEUE_BUDGET_S='2000', LISTOPS_SIZE='tiny', COMPILE_SIZE='tiny',
             COMPILE_FAMILIES='linear', LISTOPS_ARGS=f'--config.data.data_dir={tmp_path / "data"}',
             LISTOPS_HELDOUT_ARGS='--min_tokens 10 --max_tokens 40 --exclude_num_train 256',
             **env)
  proc = subprocess.run(['bash', 'benchmarks/gpu_run.sh', 'queue'], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr
  return tmp_path / name, proc.stdout


def _results(out, path):
  with tarfile.open(out / 'queue.tar') as pack:
    return pack.extractfile(f'results/{path}').read()


def _status(text):
  rows = [line.split(' | ') for line in text.split('## Queue status')[1].splitlines()
          if line.startswith('| ') and not line.startswith('| job')]
  return {r[0][2:]: r[1] for r in rows}


def test_queue_runs_peer_compile_time_and_listops_then_resumes_from_its_state(tmp_path):
  """`gpu_run.sh queue` twice at tiny sizes on the CPU. Call 1 (jobs peer, compile, sweep, spt):
  the side by side (no torch here: our side alone), the sweep inside it with FLOP/s, the compile
  times of `linear` cold / cached (autotune n/a off a GPU) with a trace, and the `spt` group's
  ListOps run (here `linear`) with its held-out evaluation; it packs queue.tar + the group's tar.
  Call 2, given those files: peer, compile time and `linear` are skipped (kept, re-emitted), the
  `positions` group (here both SPT objectives and the rotary / Amos runs) trains; the status says
  what is left (the Amos fine-tuning refuses its tiny pre-training: partial)."""
  official = tmp_path / 'official'
  official.mkdir()
  (official / 'model_wrapper.py').write_text('')   # their code "present": the torch check next
  peer_env = dict(PEER_OFFICIAL_DIR=str(official), PEER_DEVICE='cpu', PEER_BUDGET_S='500',
                  PEER_TORCH_PYTHON=str(tmp_path / 'no_torch_here'), PEER_MODELS='ponet',
                  PEER_TORCH_BATCH='2', PEER_LENGTH='64', PEER_REAL_TOKENS='50', PEER_WARMUP='1',
                  PEER_STEPS='1', PEER_ROUNDS='1', PEER_MIXERS='softmax/xla,none',
                  PEER_LENGTHS='32', PEER_BATCH='2', PEER_REPEATS='1', PEER_CHECK_S='100000',
                  PEER_JAX_CACHE=str(tmp_path / 'cache'), QUEUE_SPT_FAMILIES='linear',
                  QUEUE_POSITIONS_FAMILIES=SPT_FAMILIES, QUEUE_POSITIONS_PRETRAIN_ARGS='')
  first, text = _queue(tmp_path, 'call1', tmp_path / 'none', QUEUE_JOBS='peer compile sweep spt',
                       **peer_env)
  assert sorted(p.name for p in first.iterdir()) == ['listops_spt_0.tar', 'queue.md', 'queue.tar']
  status = _status(text)
  assert status['peer'] == 'done (our side only: no official code or torch)'
  assert status['compile time'] == 'done' and status['sweep'] == 'done (2 points, in `peer`)'
  assert status['listops spt'] == 'done (linear: done)'
  assert status['listops positions'].startswith('pending (linear,spt: pending, ')
  assert status['pathfinder32'] == 'pending' and status['positions 6x512'] == 'pending'
  # The side by side: our ponet alone in both precisions, the cuDNN check skipped for time.
  log = _results(first, 'peer/log.txt').decode()
  assert 'cannot import torch: our side only' in log and 'check_cudnn not run' in log
  record = json.loads(_results(first, 'peer/gpu_peer.json'))['models']['ponet']
  assert list(record['runs']) == ['ours ponet bfloat16', 'ours ponet float32']
  assert all(runs[0]['status'] == 'ok' for runs in record['runs'].values()), record['runs']
  assert '| ponet | bfloat16 vs ? | - |' in text and '| ponet | float32 vs ? | - |' in text
  # The sweep, one process: FLOP/s from the compiled step, no peak fraction on a CPU.
  sweep = json.loads(_results(first, 'peer/efficiency.json'))
  assert sweep['setup']['dtype'] == 'bfloat16' and sweep['setup']['isolated'] is False
  assert sweep['setup']['peak_bf16_flops'] is None and sorted(sweep['results']) == [
      'none', 'softmax/xla']
  for entry, per_length in sweep['results'].items():
    point = per_length['32']
    assert point['status'] == 'ok' and point['step_flops'] > 0, (entry, point)
    assert point['flops_used'] == max(point['step_flops'], 3e9 * point['forward_gflops'])
    assert point['flops_per_s'] == pytest.approx(point['flops_used'] / (point['step_ms'] / 1e3))
    assert point['peak_fraction'] is None
    assert point['flops_from'] in ('compiled step', '3 x forward')
  # The lower bound skips the [L, L] products: fewer flops per step than softmax.
  assert sweep['results']['none']['32']['step_flops'] < sweep['results']['softmax/xla']['32'][
      'step_flops']
  assert '**achieved TFLOP/s' in text
  # Compile time: cold wrote the cache (the train step among its entries), cached read it.
  compiled = json.loads(_results(first, 'compile_time/compile_time.json'))
  linear = compiled['families']['linear']
  assert linear['cold']['device'] == 'cpu cpu' and linear['autotune0'] == {'na': 'not a GPU'}
  assert all(0 < linear[s]['compile_s'] < 600 for s in ('cold', 'cached'))
  assert linear['cold']['cache_entries'] >= 1
  assert linear['cached']['cache_entries'] == linear['cold']['cache_entries']   # nothing new
  trace = compiled['trace']
  assert trace['family'] == 'linear' and trace['trace_file'] == 'trace_linear.tar.gz'
  assert tarfile.open(fileobj=io.BytesIO(_results(
      first, 'compile_time/trace_linear.tar.gz'))).getnames()
  row = (f'| linear | {linear["cold"]["compile_s"]:.1f} | {linear["cached"]["compile_s"]:.1f} | '
         f'n/a | cpu cpu | `{compiled["commit"]}` |')
  assert '| family | cold s | cached s | autotune 0 s | device | commit |' in text and row in text
  # The spt group's run (listops mode, its pack named for the group): test and held-out accuracy.
  test = json.loads(_member(first, 'linear/eval/test.json'))
  heldout = json.loads(_member(first, 'linear/heldout.json'))     # best checkpoint, seed-1 trees
  assert heldout['step'] == test['step'] and heldout['count'] == 2000
  assert heldout['data_changes']['data.source'] == 'tsv'
  assert '| linear | 20 | ' in text and (f'{100 * test["accuracy"]:.2f} | '
                                            f'{100 * heldout["accuracy"]:.2f} |') in text
  with tarfile.open(first / 'listops_spt_0.tar') as pack:
    names = pack.getnames()
  assert not any('tensorboard' in n for n in names)          # the pack carries no logs of TB
  assert any(n.startswith('linear/best/') for n in names)    # finished: the best checkpoint,
  assert not any(n.startswith('linear/checkpoints/') for n in names)   # not the resume ones
  first_log = _log(first, 'linear')

  # Call 2 from call 1's files: only the positions group is left to run.
  second, text = _queue(tmp_path, 'call2', first, LISTOPS_HELDOUT='0',
                        QUEUE_JOBS='peer compile sweep spt positions', **peer_env)
  assert sorted(p.name for p in second.iterdir()) == [
      'listops_positions_0.tar', 'listops_spt_0.tar', 'queue.md', 'queue.tar']
  assert (second / 'listops_spt_0.tar').read_bytes() == (first / 'listops_spt_0.tar').read_bytes()
  assert _results(second, 'compile_time/compile_time.json') == _results(
      first, 'compile_time/compile_time.json')                    # not measured again
  assert _results(second, 'peer/gpu_peer.json') == _results(first, 'peer/gpu_peer.json')
  status = _status(text)
  assert status['peer'].startswith('done') and status['compile time'] == 'done'
  assert status['listops spt'] == 'done (linear: done)'
  assert status['listops positions'] == (
      'partial (linear,spt: done, transformer,spt_causal: done, transformer,rotary: done, '
      'transformer,rotary,spt,amos: partial (pre-training step 20))')
  assert _log(second, 'linear') == first_log                # finished: not trained again
  # The positions group here: both SPT objectives, `linear,spt` (masked tokens) and
  # `transformer,spt_causal`; beside them rotary positions from scratch and rotary masked SPT with
  # Amos et al.'s recipe (words `spt,amos`, then `finetune,amos`: lr 1e-4, constant), whose
  # fine-tuning refuses the tiny 20-step pre-training as still at its data's unigram rate.
  out, column = second, text
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
  with tarfile.open(out / 'listops_positions_0.tar') as pack:
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


def test_listops_column_names_a_runs_tokenizer(tmp_path):
  sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
  import listops_column  # pylint: disable=g-import-not-at-top
  for name, data in (('adamra', {'tokenizer': 'alphanumeric'}), ('ponet', {}), ('linear', None)):
    os.makedirs(tmp_path / name)
    if data is not None:
      (tmp_path / name / 'config.json').write_text(json.dumps({'data': data}))
  rows = [listops_column.row(str(tmp_path), f) for f in ('adamra', 'ponet', 'linear')]
  assert [r['tokenizer'] for r in rows] == ['alphanumeric', 'brackets', 'brackets']
  lines = listops_column.markdown(rows).splitlines()[2:]
  assert lines[0].startswith('| adamra (tokenizer alphanumeric) | 0 |')
  assert lines[1].startswith('| ponet | 0 |') and lines[2].startswith('| linear | 0 |')


NEW_JOBS_ENV = dict(
    UTIL_SIZE='tiny', UTIL_STEPS='12', UTIL_LOG_EVERY='4',
    CAUSAL_LENGTHS='64', CAUSAL_ENTRIES='linear/prefix_sums,linear/16,softmax/cudnn',
    CAUSAL_ARGS='--repeats 1 --width 32 --heads 2 --ffn 64', GENERATION_CONTEXTS='16,64',
    GENERATION_ARGS='--tokens 4 --repeats 1 --num_layers 1 --emb_dim 32 --num_heads 2 '
                    '--mlp_dim 64',
    # Between the compiled step's temporaries + arguments at 32 tokens and at 64 (2.39 / 2.45 MB).
    LONGEST_FROM='32', LONGEST_TO='128', LONGEST_MIXERS='linear', LONGEST_MEMORY_GB='0.00225')


def test_queue_util_causal_longest_run_on_the_cpu_and_resume(tmp_path):
  """The issue's new jobs at tiny sizes. Call 1 (util, one ListOps run): its MFU is absent on a
  CPU, its FLOP/s positive and the model FLOPs summary predicts are the run's; causal and longest
  are pending. Call 2, from call 1's files, with mlm added: the ListOps record is kept as it was
  (skipped), mlm is trained on the generated corpus, causal (prefix sums = chunks, cuDNN n/a) and
  the doubling search of longest (stopped at the first length that does not fit) run."""
  util_args = f'--vocab_size 120 --data_dir {tmp_path / "data"}'
  first, text = _queue(tmp_path, 'call1', tmp_path / 'none', QUEUE_JOBS='util',
                       UTIL_RUNS='listops:linear', UTIL_ARGS=util_args, **NEW_JOBS_ENV)
  status = _status(text)
  assert status['util'] == 'done (1 runs)'
  assert status['causal'] == 'pending' and status['longest'] == 'pending'
  linear = json.loads(_results(first, 'util/run_listops_linear.json'))
  assert linear['mfu'] is None and linear['flops_per_second_per_device'] > 0
  assert linear['memory_peak_bytes_in_use'] is None                # no memory_stats on a CPU
  assert linear['windows'] == 2 and linear['last_step'] == 12 and 0 <= linear[
      'data_wait_fraction'] < 1
  assert linear['model_step_flops_per_device'] == linear['summary']['model_step_flops']
  assert linear['compiled_memory_bytes'] == linear['summary']['train_step_memory_bytes']
  assert '| listops:linear | float32 | ' in text

  second, text = _queue(tmp_path, 'call2', first, QUEUE_JOBS='util causal longest',
                        UTIL_RUNS='listops:linear mlm', UTIL_ARGS=util_args, **NEW_JOBS_ENV)
  status = _status(text)
  assert status['util'] == 'done (2 runs)' and status['causal'] == 'done'
  assert status['longest'] == 'done'
  assert _results(second, 'util/run_listops_linear.json') == _results(
      first, 'util/run_listops_linear.json')                      # skipped, not trained again
  mlm = json.loads(_results(second, 'util/run_mlm.json'))
  assert mlm['dtype'] == 'bfloat16' and mlm['config'] == 'configs/ponet_pretrain.py:mlm,tiny'
  assert mlm['mfu'] is None and mlm['flops_per_second_per_device'] > 0
  assert mlm['model_step_flops_per_device'] == mlm['summary']['model_step_flops']
  causal = json.loads(_results(second, 'causal/causal_linear_64.json'))
  assert causal['clock'] == 'CPU time' and causal['dtype'] == 'bfloat16'
  points = causal['results']['64']
  assert points['softmax/cudnn']['status'].startswith('n/a: ')
  baseline, chunked = points['linear/prefix_sums'], points['linear/16']
  assert chunked['step_ms'] == chunked['cpu_ms'] and chunked['step_ms_ratio_to_prefix_sums'] == (
      chunked['step_ms'] / baseline['step_ms'])
  assert abs(chunked['first_loss'] - baseline['first_loss']) <= 2e-2 * baseline['first_loss']
  generation = json.loads(_results(second, 'causal/generation.json'))
  assert sorted(generation['linear']) == ['16', '64', 'speed_ratio_shortest_over_longest']
  assert generation['softmax']['64']['cache_bytes'] > generation['softmax']['16']['cache_bytes']
  assert generation['linear']['64']['cache_bytes'] == generation['linear']['16']['cache_bytes']
  longest = json.loads(_results(second, 'longest/efficiency.json'))['results']['linear']
  budget = 0.00225 * 2**30
  fits, over = longest['32'], longest['64']
  assert fits['status'] == 'ok' and fits['step_ms'] > 0
  assert fits['compiled_temp_bytes'] + fits['argument_bytes'] <= budget
  assert over['status'] == 'out of memory' and over['step_ms'] is None
  assert over['compiled_temp_bytes'] + over['argument_bytes'] > budget   # compiled, not run
  assert longest['128']['note'] == 'not compiled: out of memory at 64'
  assert f'| linear | 32 | {fits["compiled_total_bytes"] / 2**20:.0f} | ' in text
  assert '| 64 | linear/16 | ' in text and '| linear | 64 | ' in text


def test_queue_status_of_the_new_jobs_cut_by_the_budget(tmp_path):
  """What a call cut short leaves: util with one run of two, causal with one file of three,
  longest with a length not run for the budget: partial, and the next call says what is left."""
  sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
  import gpu_queue  # pylint: disable=g-import-not-at-top
  (tmp_path / 'util').mkdir()
  (tmp_path / 'util' / 'run_mlm.json').write_text('{}')
  (tmp_path / 'causal').mkdir()
  (tmp_path / 'causal' / 'generation.json').write_text('{}')
  (tmp_path / 'longest').mkdir()
  (tmp_path / 'longest' / 'efficiency.json').write_text(json.dumps({
      'setup': {'lengths': [4096, 8192, 16384]},
      'results': {'ponet': {'4096': {'status': 'ok'}, '8192': {'status': 'not run: budget spent'}},
                  'softmax/xla': {'4096': {'status': 'ok'}, '8192': {'status': 'out of memory'},
                                  '16384': {'status': 'out of memory'}}}}))
  rows = {job: (state, todo) for job, state, todo in gpu_queue.status_rows(
      str(tmp_path), str(tmp_path), {}, ['listops:ponet', 'mlm'], ['4096', '16384'])}
  assert rows['util'] == ('partial (1 of 2 runs)',
                          'trains and summarises listops:ponet (benchmarks/step_utilisation.py)')
  assert rows['causal'] == ('partial (1 of 3 files)', 'measures causal_linear_4096, '
                            'causal_linear_16384')
  assert rows['longest'] == ('partial (1 of 2 families)', 'compiles ponet from 8192')
