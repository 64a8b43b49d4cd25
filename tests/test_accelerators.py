"""Every registered model's training step compiled for a TPU slice (libtpu's compile-only v5e 2x2
topology: 4 chips, the batch split over them) and exported for CUDA, on this CPU machine; the
program's collectives, memory and cost read back; the roofline arithmetic; the command line."""
import json
import os
import subprocess
import sys

import jax
import pytest
from sized_models import ROOT, SIZED_BY, load_benchmark, load_config

from poolformers_jax import config as config_lib
from poolformers_jax.config.lra import FAMILIES
from poolformers_jax.trainer import accelerators, setup as setup_lib, step as step_lib
from poolformers_jax.trainer.setup import make_setup

TOPOLOGY = 'v5e:2x2'
V5E = accelerators.CHIPS['v5e']
# Every layer and mixer compiled for the slice, through the models that hold them: the LRA
# encoder with every family's mixer, and the models that add what the encoder lacks (decoder
# and cross-attention, tied embeddings and PoNet's segments, mixup over the global batch, 2-D
# ContextPool with BatchNorm). Each libtpu compile takes 15-30 s here, so the other registered
# models (the char LM, PoNet classifier and dual encoder: layers compiled here already; HVT's
# token pooling, Swin's windows, MSAC's 2-D forms) are compiled at their paper settings by
# benchmarks/accelerators_bench.py, recorded in docs/accelerators.md.
MODELS_COMPILED = ('lra_encoder', 'transformer_seq2seq', 'ponet_mlm', 'vit', 'cp_convnet')
CASES = {**{name: SIZED_BY[name] for name in MODELS_COMPILED},
         **{f'lra_encoder[{family}]': (f'lra_listops.py:{family},tiny', {}) for family in FAMILIES
            if family not in ('transformer', 'linear_reference', 'adamra_eq8')}}
# (the transformer is SIZED_BY's lra_encoder; linear_reference and adamra_eq8 are linear's and
# adamra's code paths)
TIED_EMBEDDINGS = ('transformer_seq2seq', 'ponet_mlm')
EXACT_GRADIENT_ALL_REDUCE = ('lra_encoder', 'lra_encoder[linear]',
                             'lra_encoder[ponet]', 'lra_encoder[contextpool]')
OTHER_COLLECTIVES = {'vit': ('collective-permute',),
                     'transformer_seq2seq': ('all-to-all',)}


def _config(case):
  spec, overrides = CASES[case]
  return config_lib.override(load_config(spec, overrides), batch_size=8, eval_batch_size=8)


@pytest.mark.parametrize('case', sorted(CASES))
def test_training_step_compiles_for_a_tpu_slice_and_exports_for_cuda(case):
  setup, train, eval_step = accelerators.compile_for_topology(_config(case), TOPOLOGY)
  assert [d.device_kind for d in setup.mesh.devices.flat] == ['TPU v5 lite'] * 4
  text = train.as_text()
  assert ':T(' in text   # TPU tiled layouts: a TPU program, not a CPU one compiled by mistake
  report = accelerators.program_report(train, V5E, 4)
  memory = report['memory']
  param_bytes = 4 * setup_lib.param_count(setup.abstract_state.params)
  # Replicated float32 parameters and two AdamW moments are arguments on every chip.
  assert memory['argument'] >= 3 * param_bytes and report['fits']
  assert report['flops'] > 0 and report['bytes_accessed'] > memory['argument'] / 2
  # Data parallelism: what crosses the chips is the gradient, all-reduced; for the LRA encoders
  # as ONE all-reduce of exactly the float32 parameters (+ the step's scalar loss and metric
  # sums). Elsewhere within bounds, each reason pinned: tied input/output embeddings (the
  # lookup's and the output projection's gradient halves are all-reduced apart: + one
  # embedding); BatchNorm (batch moments in the forward); gradients XLA reduces before a local
  # transformation (AdaMRA's folded query maps: fewer bytes; relative-position tables: more);
  # parameters with a zero gradient (not reduced). Other collectives: DeiT's mixup / cutmix pairs
  # each image with its mirror in the GLOBAL batch (a collective-permute of input images), and
  # the seq2seq step has a few small all-to-alls of XLA-made concatenates.
  found = report['collectives']
  reduced = found['all-reduce']['bytes']
  largest = max(4 * leaf.size for leaf in jax.tree.leaves(setup.abstract_state.params))
  if case in EXACT_GRADIENT_ALL_REDUCE:
    assert set(found) == {'all-reduce'} and found['all-reduce']['count'] == 1, found
    assert 0 <= reduced - param_bytes <= 64, (found, param_bytes)
  else:
    tied = largest if case in TIED_EMBEDDINGS else 0
    assert 0.5 * param_bytes <= reduced <= 1.25 * param_bytes + tied + 64, (found, param_bytes)
    others = {kind: v['bytes'] for kind, v in found.items() if kind != 'all-reduce'}
    assert set(others) <= set(OTHER_COLLECTIVES.get(case, ())), found
    if 'all-to-all' in others:
      assert others['all-to-all'] < 0.05 * reduced, found
    if 'collective-permute' in others:   # at most the chip's own images, in and out
      images = step_lib.batch_spec(setup)['inputs']
      assert others['collective-permute'] <= 2 * images.size // 4 * images.dtype.itemsize, found
  # The eval step reads the replicated parameters and all-reduces only its metric sums: no
  # activation ever crosses the chips in the forward pass.
  eval_report = accelerators.program_report(eval_step, V5E, 4)
  assert set(eval_report['collectives']) <= {'all-reduce'}, eval_report['collectives']
  assert eval_report['collectives'].get('all-reduce', {'bytes': 0})['bytes'] <= 64

  one_device = make_setup(config_lib.override(_config(case), num_devices=1), need_files=False)
  exported = accelerators.export_for_cuda(one_device)
  assert exported.platforms == ('cuda',) and exported.nr_devices == 1
  state_avals = jax.tree.leaves(one_device.abstract_state)
  assert [a.shape for a in exported.in_avals[:len(state_avals)]] == [a.shape for a in state_avals]
  assert exported.out_avals[:len(state_avals)] == exported.in_avals[:len(state_avals)]
  module = exported.mlir_module()
  assert 'stablehlo.dot_general' in module or 'stablehlo.convolution' in module
  assert 'callback' not in module   # a host callback cannot run in a GPU program


def test_per_chip_cost_follows_the_per_chip_batch():
  """The same global batch on twice the chips: half the examples per chip, so the step's flops
  per chip halve (up to the optimizer update, which every chip repeats); memory per chip falls."""
  config = _config('lra_encoder[linear]')
  reports = {}
  for topology, chips in (('v5e:2x2', 4), ('v5e:2x4', 8)):
    _, train, _ = accelerators.compile_for_topology(config, topology)
    reports[chips] = accelerators.program_report(train, V5E, chips)
  ratio = reports[8]['flops'] / reports[4]['flops']
  assert 0.45 < ratio < 0.6, ratio
  assert reports[8]['memory']['temp'] < reports[4]['memory']['temp']


HLO = '''
  %all-reduce.5 = (f32[]{:T(128)}, f32[32,64]{1,0:T(8,128)S(1)}, bf16[16]{0}) all-reduce(%a, %b, %c), channel_id=1
  %x = f32[4]{0} add(%y, %z)
  %all-gather-start.2 = (f32[2,8]{1,0}, f32[8,8]{1,0}) all-gather-start(%w), dimensions={0}
  %all-gather-done.2 = f32[8,8]{1,0} all-gather-done(%all-gather-start.2)
  %cp = s32[10]{0} collective-permute(%v), source_target_pairs={{0,1}}
  %all-reduce-start = f32[3]{0} all-reduce-start(%u), to_apply=%sum
'''  # noqa: E501  (HLO lines as XLA prints them)


def test_collectives_are_counted_with_their_bytes():
  assert accelerators.collectives(HLO) == {
      'all-reduce': {'count': 2, 'bytes': 4 + 32 * 64 * 4 + 16 * 2 + 3 * 4},
      'all-gather': {'count': 1, 'bytes': (2 * 8 * 4 + 8 * 8 * 4) // 2},   # '-start': the result
      'collective-permute': {'count': 1, 'bytes': 40},
  }


def test_roofline_takes_the_largest_term():
  chip = accelerators.Chip('x', 2, 64e9, 100e12, 1e12, 0.5e12, '')   # per device: half of each
  flops_bound = accelerators.roofline(chip, 4, flops=5e12, bytes_accessed=1e9, all_reduce_bytes=1e6)
  assert flops_bound['bound'] == 'flops' and flops_bound['seconds'] == pytest.approx(0.1)
  assert flops_bound['memory_seconds'] == pytest.approx(2e-3)
  assert flops_bound['ici_seconds'] == pytest.approx(2 * 3 / 4 * 1e6 / 0.25e12)
  memory_bound = accelerators.roofline(chip, 4, flops=1e9, bytes_accessed=1e12, all_reduce_bytes=0)
  assert memory_bound['bound'] == 'memory' and memory_bound['seconds'] == pytest.approx(2.0)
  ici_bound = accelerators.roofline(chip, 2, flops=0, bytes_accessed=0, all_reduce_bytes=1e9)
  assert ici_bound['bound'] == 'ici' and ici_bound['seconds'] == pytest.approx(1e9 / 0.25e12)
  no_ici = accelerators.CHIPS['v4']                  # no published ICI figure: no ICI term
  assert 'ici_seconds' not in accelerators.roofline(no_ici, 8, 1.0, 1.0, 1e9)


def test_fit_advice_names_the_accumulation_that_fits():
  # CP-ViT-B/16 at 384 px, batch 1024 on v5e 2x2: libtpu's refusal said 70.98G of temporaries
  # against 15.75G; its parameters + optimizer state ~1.4 GiB per chip. Halving the
  # per-chip batch halves the temporaries: 1.42 + 70.98 / 8 <= 15.75 first at k = 8.
  gib = 2 ** 30
  config = config_lib.override(load_config('lra_listops.py:linear,tiny', {}), batch_size=1024,
                                 num_train_steps=1000, **{'optimizer.warmup_steps': 10})
  line = accelerators.fit_advice('v5e:2x2', config, devices=4, temp=70.98 * gib,
                                 fixed=1.42 * gib, hbm=15.75 * gib)
  assert line.startswith('v5e:2x2: the training step needs 72.4 GiB per chip, the chip has 15.8')
  assert ('--config.batch_size=128 --config.optimizer.grad_accum_steps=8 '
          '--config.num_train_steps=8000 --config.optimizer.warmup_steps=80') in line
  assert '~10.3 GiB estimated' in line
  # benchmarks/accelerators_bench.py compiles that suggestion again as the config's `__fit` record.
  benchmark = load_benchmark('accelerators_bench')
  assert benchmark.fit_overrides({'error': 'error: ' + line}) == (
      '--config.batch_size=128', '--config.optimizer.grad_accum_steps=8',
      '--config.num_train_steps=8000', '--config.optimizer.warmup_steps=80')
  assert benchmark.fit_overrides({'error': 'error: v5e:2x2: use a slice with more chips'}) == ()
  # Parameters alone too large, or a per-chip batch of 1 already: no accumulation helps.
  assert 'use a slice with more chips' in accelerators.fit_advice(
      'v5e:2x2', config, devices=4, temp=gib, fixed=16 * gib, hbm=15.75 * gib)
  assert 'use a slice with more chips' in accelerators.fit_advice(
      'v5e:2x2', config_lib.override(config, batch_size=4), devices=4, temp=20 * gib,
      fixed=gib, hbm=15.75 * gib)


def test_benchmark_compiles_the_next_suggestion_when_an_accumulation_is_refused(
    tmp_path, monkeypatch):
  """A refused step is compiled again with the accumulation its refusal names (`__fit`); one
  that compiles above the chip's memory (summary's estimate fell short) is followed by `__fit2`
  with the accumulation its `fit_advice` names; a fitting one ends the chain; finished records
  are reused."""
  benchmark = load_benchmark('accelerators_bench')
  refusal = lambda accum: {'error': f'error: v5e:2x2: the training step needs 17.4 GiB per chip, '
                           f'the chip has 15.8 GiB: try --config.batch_size={1024 // accum} '
                           f'--config.optimizer.grad_accum_steps={accum} (the same updates)'}
  too_big = {'fits': False, 'fit_advice': refusal(8)['error'].removeprefix('error: ')}
  answers = {(): refusal(4), ('--config.batch_size=256', '--config.optimizer.grad_accum_steps=4'):
             too_big}
  calls = []

  def fake_run_one(spec, topology, out_path, overrides=()):
    calls.append((os.path.basename(out_path), tuple(overrides)))
    record = dict(answers.get(tuple(overrides), {'fits': True}), config=spec,
                  overrides=list(overrides), topology=topology, compile_seconds=1.0)
    with open(out_path, 'w') as f:
      json.dump(record, f)
    return record

  monkeypatch.setattr(benchmark, 'run_one', fake_run_one)
  monkeypatch.setattr(benchmark, '_report', lambda record: record)
  argv = ['accelerators_bench.py', '--output_dir', str(tmp_path), '--topologies', 'v5e:2x2',
          '--only', 'imagenet.py:vit_b16']
  monkeypatch.setattr(sys, 'argv', argv)
  benchmark.main()
  assert calls == [
      ('imagenet__vit_b16__v5e_2x2.json', ()),
      ('imagenet__vit_b16__v5e_2x2__fit.json',
       ('--config.batch_size=256', '--config.optimizer.grad_accum_steps=4')),
      ('imagenet__vit_b16__v5e_2x2__fit2.json',
       ('--config.batch_size=128', '--config.optimizer.grad_accum_steps=8'))]
  benchmark.main()   # resumed: every record exists, nothing is compiled again
  assert len(calls) == 3


def test_table_says_whether_a_refused_step_was_compiled_again(tmp_path, capsys):
  """docs/accelerators.md's rows: a refusal points at the next row only when that row is its
  accumulation's compile."""
  benchmark = load_benchmark('accelerators_bench')
  refusal = ('error: v5e:2x2: the training step needs 40.1 GiB per chip, the chip has 15.8 GiB: '
             'try --config.batch_size=256 --config.optimizer.grad_accum_steps=4 (the same updates)')
  for name, config in (('a__v5e_2x2', 'a.py:x'), ('b__v5e_2x2', 'b.py:y')):
    with open(tmp_path / f'{name}.json', 'w') as f:
      json.dump({'config': config, 'topology': 'v5e:2x2', 'error': refusal}, f)
  with open(tmp_path / 'a__v5e_2x2__fit.json', 'w') as f:
    json.dump({'config': 'a.py:x', 'topology': 'v5e:2x2', 'overrides': ['--config.batch_size=256'],
               'error': 'error: v5e:2x2: use a slice with more chips'}, f)
  benchmark.print_tables(str(tmp_path))
  lines = capsys.readouterr().out.splitlines()[2:]
  assert [line.split(' | ')[0] for line in lines] == [
      '| `a.py:x`', '| `a.py:x --config.batch_size=256`', '| `b.py:y`']
  assert lines[0].endswith('(next row) |') and '40.1 GiB per chip of 15.8 GiB' in lines[0]
  assert lines[1].endswith('v5e:2x2: use a slice with more chips |')
  assert lines[2].endswith('(not yet compiled) |')


def test_cpu_runs_start_quietly_with_libtpu_installed():
  """libtpu is installed for the tests (requirements-test.txt); on this machine without TPU chips
  a run of ours (runtime.configure_program) must neither start the TPU runtime nor print its
  host-lookup warnings."""
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  result = subprocess.run(
      [sys.executable, '-c', 'from poolformers_jax import runtime; runtime.configure_program(); '
       'import jax; print(jax.default_backend())'],
      env=env, capture_output=True, text=True, check=True)
  assert result.stdout.strip() == 'cpu' and result.stderr == '', result.stderr


def _summary(*args):
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}   # as a user runs it
  return subprocess.run([sys.executable, '-m', 'poolformers_jax.summary', *args], cwd=ROOT,
                        env=env, capture_output=True, text=True)


def test_summary_topology_prints_one_json_object_and_bad_slices_one_line(tmp_path):
  result = _summary('--config', 'configs/lra_listops.py:linear,tiny', '--topology', TOPOLOGY)
  assert result.returncode == 0, result.stderr
  assert result.stderr == ''   # libtpu's host-lookup warnings are not shown
  out = json.loads(result.stdout)
  assert out['devices'] == 4 and out['per_device_batch'] == out['batch_size'] // 4
  train = out['train_step']
  assert train['fits'] and train['collectives']['all-reduce']['count'] == 1
  assert out['train_hours'] == pytest.approx(
      out['num_train_steps'] * train['roofline']['seconds'] / 3600)
  bad = _summary('--config', 'configs/lra_listops.py:linear,tiny', '--topology', 'v9:2x2')
  assert bad.returncode == 2 and bad.stderr.count('\n') == 1
  assert bad.stderr.startswith("error: --topology 'v9:2x2': give <chip>:<shape>")
  path = tmp_path / 'step.mlir'
  exported = _summary('--config', 'configs/lra_listops.py:linear,tiny', '--export_cuda', str(path))
  assert exported.returncode == 0, exported.stderr
  assert json.loads(exported.stdout)['platforms'] == ['cuda']
  assert 'module @jit_train_step' in path.read_text()
