"""Bad input: every config / data problem is found before anything is compiled, as one line
`<what is wrong>; <what to do>`; every entry point (train.py, eval.py, the `python -m
poolformers_jax.<tool>` commands, the data generators, the benchmarks) prints it as `error: ...`
with exit code 2 (poolformers_jax/errors.py)."""
import json
import os
import subprocess
import sys

import pytest
from tiny_runs import REPO, tiny_config

from poolformers_jax import errors
from poolformers_jax.config import validate
from poolformers_jax.trainer.setup import make_setup

BAD = {   # override -> what the line must say
    'model.num_classes=2': ({'model.num_classes': 2},
                            r'config.model.num_classes=2 but listops has 10 classes; .*=10$'),
    'model.vocab_size=5': ({'model.vocab_size': 5},
                           r'config.model.vocab_size=5 but the token ids of listops go up to 17; '
                           r'.*=18$'),
    'model.max_length=16': ({'model.max_length': 16},
                            r'config.model.max_length=16 is shorter than the inputs of listops '
                            r'\(32 tokens\)'),
    'data.source=web': ({'data.source': 'web'},
                        r"config.data.source='web' is not a ListOps source; choose one of "
                        r"\['generated', 'tsv'\]"),
    'eval_batch_size=12': ({'eval_batch_size': 12},
                           r'config.eval_batch_size=12 must be divisible by the number of devices '
                           r'\(8\).*; use a multiple of 8$'),
    'eval_batch_size=-8': ({'eval_batch_size': -8},
                           r'config.eval_batch_size=-8 must be a positive'),
    'batch_size=-8': ({'batch_size': -8}, r'config.batch_size=-8 must be a positive integer'),
    'best_metric=acc': ({'best_metric': 'acc'},
                        r"config.best_metric='acc' is not a validation metric of this "
                        r"classification task; choose one of \['accuracy', 'accuracy_top5', "
                        r"'count', 'loss'\]"),
    'best_mode=maximum': ({'best_mode': 'maximum'},
                          r"config.best_mode='maximum' must be 'max' or 'min'"),
    'num_train_steps=-5': ({'num_train_steps': -5},
                           r'config.num_train_steps=-5 must be an integer >= 0; set '
                           r'--config.num_train_steps to the number of steps to train'),
    'model.dim=-32': ({'model.dim': -32}, r'config.model.dim=-32 must be positive'),
    'model.num_heads=0': ({'model.num_heads': 0}, r'config.model.num_heads=0 must be positive'),
    'model.dropout_rate=1.5': ({'model.dropout_rate': 1.5},
                               r'dropout_rate=1.5 must be in \[0, 1\)'),
    'optimizer.learning_rate=-1': ({'optimizer.learning_rate': -1.0},
                                   r'learning_rate=-1.0 must be a finite number >= 0'),
    'optimizer.grad_accum_steps=0': ({'optimizer.grad_accum_steps': 0},
                                     r'grad_accum_steps=0 must be a positive integer'),
    'label_smoothing=1': ({'label_smoothing': 1.0}, r'label_smoothing=1.0 must be in \[0, 1\)'),
    'keep_checkpoints=0': ({'keep_checkpoints': 0}, r'keep_checkpoints=0 must be a positive'),
    'profile_steps=(5, 2)': ({'profile_steps': (5, 2)},
                             r'profile_steps=\(5, 2\) must be \(first, last\)'),
    'num_devices=16': ({'num_devices': 16}, r'config.num_devices=16 but 8 devices exist'),
}


@pytest.mark.parametrize('case', sorted(BAD))
def test_bad_config_fails_in_setup_with_one_line(data_dir, case):
  overrides, message = BAD[case]
  config = tiny_config(data_dir, **overrides)
  with pytest.raises(ValueError, match=message) as error:
    make_setup(config)           # before any model is built, let alone compiled
  assert '\n' not in str(error.value)


def test_image_checks_patch_size_and_mixup():
  import ml_collections

  from poolformers_jax.config import base_config
  from poolformers_jax.data import DatasetInfo
  from poolformers_jax.trainer import sharding
  info = DatasetInfo('cifar10', 'classification', 10, None, (32, 32, 3), {'train': 1})
  devices = sharding.make_mesh(1).devices.size

  def config(**model):
    config = base_config('cifar10')
    config.update(num_train_steps=1, batch_size=8, eval_batch_size=8)
    config.model = ml_collections.ConfigDict(dict(name='vit', dim=8, **model))
    return config

  with pytest.raises(validate.ConfigError, match=r'config.model.patch_size=0 must be positive'):
    validate.check_config(config(patch_size=0), info, devices=devices)
  with pytest.raises(validate.ConfigError,
                     match=r'the 32x32 images of cifar10 are not divisible by '
                           r'config.model.patch_size=5; choose'):
    validate.check_config(config(patch_size=5), info, devices=devices)
  validate.check_config(config(patch_size=4), info, devices=devices)           # a good one passes
  lm = DatasetInfo('enwik8', 'lm', 256, 256, (64,), {'train': 1})
  bad = config(patch_size=4)
  bad.mixup.update(mixup_alpha=0.8, cutmix_alpha=0.0)
  with pytest.raises(validate.ConfigError, match=r'config.mixup is for image classification but '
                                                 r'enwik8 is lm'):
    validate.check_config(bad, lm, devices=devices)


def test_the_wrapper_prints_one_line_and_exits_2(capsys):
  def main(argv):
    raise validate.ConfigError('config.x=1 is wrong\n(really); set config.x=2')
  with pytest.raises(SystemExit) as exit_:
    errors.one_line_errors(main)([])
  assert exit_.value.code == 2
  assert capsys.readouterr().err == 'error: config.x=1 is wrong (really); set config.x=2\n'

  def diverges(argv):
    raise FloatingPointError('training loss is nan at step 3: ...')
  with pytest.raises(SystemExit) as exit_:
    errors.one_line_errors(diverges)([])
  assert exit_.value.code == 1


@pytest.mark.parametrize('argv, message', [
    (['train.py', '--config', 'configs/lra_listops.py:tiny', '--config.model.num_classes=2'],
     'error: config.model.num_classes=2 but listops has 10 classes; remove the override'),
    (['eval.py', '--config', 'configs/lra_nofile.py', '--batch_size=0'],
     "error: --config: configs/lra_nofile.py not found: give a config file, or "
     "configs/<task>.py[:words] for a shipped one, <task> one of cifar, enwik8, "),
    (['eval.py', '--config.data.source=tsv'],   # an override of the run's data, no --config
     'error: --config.data.source overrides a config file: give --config too'),
    (['train.py', '--config=configs/lra_listops.py', 'ponet,small'],   # words after --config=
     "error: unexpected argument 'ponet,small' after --config configs/lra_listops.py: the words "
     'go after a colon, without a space: --config configs/lra_listops.py:ponet,small'),
    (['train.py', '--config=configs/lra_listops.py:ponet', 'tiny'],   # after the words: no hint
     "error: unexpected arguments ['tiny']: every option is a flag"),
])
def test_command_lines_end_in_one_stderr_line_with_exit_code_2(argv, message, tmp_path):
  proc = subprocess.run([sys.executable, *argv, '--workdir', str(tmp_path)], cwd=REPO,
                        capture_output=True, text=True, timeout=300,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 2
  (line,) = proc.stderr.splitlines()
  assert line.startswith(message), proc.stderr
  assert not os.listdir(tmp_path)                  # nothing written, nothing trained


# Every entry point, one bad input each: argv after `python` -> what its one line must say. All
# run as a user runs them (tests/commands.py `run`: one forked process per command).
ENTRY_POINTS = {
    'train.py': (['train.py', '--config', 'configs/lra_listops.py', 'ponet,small'],
                 "unexpected argument 'ponet,small' after --config configs/lra_listops.py: the "
                 'words go after a colon, without a space: '
                 '--config configs/lra_listops.py:ponet,small'),
    'eval.py': (['eval.py', '--config', 'configs/lra_listops.py:ponet,smal'],
                "unknown model family / size / protocol / stage / model size / positions word / "
                "recipe / rates / subheads / mixer dropout % 'smal'"),
    'average': (['-m', 'poolformers_jax.average', '--last', '5'],
                '/config.json not found: pass the --workdir of a train.py run'),
    'translate': (['-m', 'poolformers_jax.translate', '--input', '-'],
                  '/config.json not found: pass the --workdir of a train.py run'),
    'reproduce --task': (['-m', 'poolformers_jax.reproduce', 'lra', '--task', 'listop'],
                         "--task 'listop': unknown ['listop']; choose from listops,text,"),
    'reproduce --set': (['-m', 'poolformers_jax.reproduce', 'lra', '--task', 'listops',
                         '--families', 'transformer,adamra', '--set',
                         'model.mixer_kwargs.router_gate=straight_through', '--dry_run'],
                        "--set for configs/lra_listops.py:transformer,full: mixer 'softmax' "
                        "(MultiHeadAttention) has no option(s) ['router_gate']"),
    'poolformers-jax': (['-m', 'poolformers_jax', 'reproduce', 'lra', '--task', 'listop'],
                        "--task 'listop': unknown ['listop']; choose from listops,text,"),
    'poolformers-jax program': (['-m', 'poolformers_jax', 'trian', '--config', 'lra_listops'],
                                "unknown program 'trian'; usage: poolformers-jax <train|eval|"),
    'reproduce flag': (['-m', 'poolformers_jax.reproduce', 'lra', '--familes', 'all', '--workdir',
                        'OUT'],
                       'unrecognized arguments: --familes all; see python -m '
                       'poolformers_jax.reproduce --help'),
    'pathfinder report': (['benchmarks/pathfinder_report.py', '--difficulty', 'curv_7'],
                          "argument --difficulty: invalid choice: 'curv_7'"),
    'prepare': (['-m', 'poolformers_jax.data.prepare', 'lra', '--release_dir', '/missing'],
                '--release_dir /missing is not a folder; download lra_release.gz'),
    'listops generator': (['-m', 'poolformers_jax.data.generators.listops', '--out_dir', 'OUT'],
                          'the following arguments are required: --seed'),
    'pathfinder generator': (['-m', 'poolformers_jax.data.generators.pathfinder', '--out_dir',
                              'OUT', '--resolution', '64'],
                             'argument --resolution: invalid choice: 64 (choose from 32, 128)'),
    'build_tfds': (['poolformers_jax/data/build_tfds.py', 'imdb_reviews', '--data_dir', 'OUT'],
                   "No module named 'tensorflow': run this in the data-preparation environment"),
    'efficiency': (['benchmarks/efficiency.py', '--output_dir', 'OUT', '--mixers', 'ponet,pnet'],
                   "--mixers: ['pnet'] are not registered; choose from"),
    'host_memory': (['benchmarks/host_memory_bench.py', '--output_dir', 'OUT', '--steps', 'many'],
                    "flag --steps=many: invalid literal for int()"),
    'input_pipeline': (['benchmarks/input_pipeline.py', '--datasets', 'listops'],
                       '--output_dir is required'),
    'translation benchmark': (['benchmarks/translation_bench.py', '--output_dir', 'OUT',
                               '--decode_length', '16'],
                              "Unknown command line flag 'decode_length'. Did you mean: "
                              'decode_sentences ?'),
    'ponet_transfer': (['benchmarks/ponet_transfer.py', '--output_dir', 'OUT', '--lenghts', '512'],
                       "Unknown command line flag 'lenghts'"),
}


@pytest.fixture(scope='module')
def entry_point_runs(tmp_path_factory):
  """Each ENTRY_POINTS command run once, OUT (and the missing --workdir) inside a fresh folder."""
  out = tmp_path_factory.mktemp('entry_points')
  names = sorted(ENTRY_POINTS)
  commands = []
  for name in names:
    argv = [str(out / 'OUT') if a == 'OUT' else a for a in ENTRY_POINTS[name][0]]
    if name in ('average', 'translate', 'train.py', 'eval.py', 'reproduce --task',
                'reproduce --set', 'poolformers-jax'):
      argv += ['--workdir', str(out / 'no_run')]
    commands.append(argv)
  proc = subprocess.run([sys.executable, os.path.join(REPO, 'tests', 'commands.py'), 'run'],
                        input=json.dumps(commands), capture_output=True, text=True, cwd=REPO,
                        timeout=600, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 0, proc.stderr[-3000:]
  return dict(zip(names, json.loads(proc.stdout))), out


@pytest.mark.parametrize('name', sorted(ENTRY_POINTS))
def test_every_entry_point_ends_bad_input_in_one_line_with_exit_code_2(entry_point_runs, name):
  runs, out = entry_point_runs
  result = runs[name]
  assert result['code'] == 2, result
  (line,) = result['stderr'].splitlines()       # nothing before it, nothing after it
  assert line.startswith('error: ') and ENTRY_POINTS[name][1] in line, line
  assert result['stdout'] == ''
  assert not os.path.exists(out / 'OUT') and not os.path.exists(out / 'no_run')  # nothing written


def test_reproduce_checks_the_data_with_the_configs_of_the_families_it_runs(tmp_path):
  """A --set key that only AdaMRA's config has passes with --families adamra (the data check
  used to load the transformer config with it), and fails in one line for families without it."""
  from poolformers_jax import reproduce
  from poolformers_jax.experiments import lra
  args = ['lra', '--task', 'listops', '--families', 'adamra', '--size', 'tiny', '--workdir',
          str(tmp_path), '--set', 'model.mixer_kwargs.router_gate=straight_through', '--dry_run']
  assert reproduce.command(args) is None
  assert lra.plan(['listops'], ['adamra'], str(tmp_path), seeds=[0, 1], size='tiny',
                        overrides=['model.mixer_kwargs.router_gate=straight_through']) == [
      f'listops/adamra seed {s}: to train (20 steps) in {tmp_path}/listops/adamra/seed{s}'
      for s in (0, 1)]
  with pytest.raises(ValueError, match=r"--set for .*lra_listops.py:ponet,tiny: mixer 'ponet' "
                     r"\(PoNet\) has no option\(s\) \['router_gate'\]"):
    lra.check_configs(['listops'], ['adamra', 'ponet'], 'tiny',
                            ['model.mixer_kwargs.router_gate=straight_through'])
  assert not os.listdir(tmp_path)


def test_gpu_run_needs_its_wheels_first(tmp_path):
  script = os.path.join(REPO, 'benchmarks', 'gpu_run.sh')
  os.makedirs(tmp_path / 'benchmarks')
  os.symlink(script, tmp_path / 'benchmarks' / 'gpu_run.sh')   # a checkout without .whl/
  for mode, message in (('bfloat16', "error: .whl/ holds no wheels; run 'bash benchmarks/"
                                     "gpu_run.sh download' first"),
                        ('bf16', "error: mode 'bf16' is not one of download float32 bfloat16")):
    proc = subprocess.run(['bash', str(tmp_path / 'benchmarks' / 'gpu_run.sh'), mode],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.splitlines()) == 1
