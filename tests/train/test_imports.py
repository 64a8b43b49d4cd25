"""A mixer of the user's own, from a module outside the package, in our trainer without editing
the package: `--config.imports=<module>` (train.py, eval.py, summary, reproduce import it before
the registries are read) or an installed distribution's `poolformers_jax.mixers` entry point. A
run directory runs no code unasked: the modules only its config.json names are refused by every
program that reads it, unless --trust_imports."""
import ast
import json
import os
import shutil
import subprocess
import sys

from tiny_runs import REPO, tiny_config, tiny_overrides

from poolformers_jax.train import train_and_evaluate

FIXTURES = os.path.join(REPO, 'tests', 'fixtures')   # my_mixer.py registers 'fixture_mean_mixer'


def _env(*paths):
  path = os.pathsep.join([*paths, os.environ.get('PYTHONPATH', '')]).rstrip(os.pathsep)
  return {**os.environ, 'PYTHONPATH': path,
          'XLA_FLAGS': '--xla_force_host_platform_device_count=2'}


def _run(script, *args, env):
  return subprocess.run([sys.executable, script, *args], cwd=REPO, capture_output=True, text=True,
                        timeout=600, env=env)


def test_own_mixer_trains_validates_documents_and_passes_the_kit_from_its_module_alone(
    data_dir, tmp_path):
  """A throw-away mixer module in a temporary package: registered by decoration, trained by
  train.py and evaluated by eval.py (`config.imports`), its kit report and docs/api.md row read
  from its one declaration, and config validation accepts it for length buckets (its traits say
  the amount of padding does not matter; a name table would refuse an unknown name)."""
  (tmp_path / 'lab').mkdir()
  (tmp_path / 'lab' / '__init__.py').write_text('')
  shutil.copy(os.path.join(FIXTURES, 'my_mixer.py'), tmp_path / 'lab' / 'my_mixer.py')
  workdir = str(tmp_path / 'run')
  overrides = [f'--config.{k}={v}' for k, v in tiny_overrides(data_dir).items()]
  own = ['--config.model.mixer=fixture_mean_mixer', '--config.imports=lab.my_mixer']
  trained = _run('train.py', '--config', 'configs/lra_listops.py:transformer,tiny', '--workdir',
                 workdir, *overrides, *own, env=_env(str(tmp_path)))
  assert trained.returncode == 0, trained.stderr[-3000:]
  saved = json.load(open(os.path.join(workdir, 'config.json')))
  assert saved['imports'] == 'lab.my_mixer' and saved['model']['mixer'] == 'fixture_mean_mixer'
  # eval.py with the run's own config, trusted: config.json's imports bring the mixer back.
  evaluated = _run('eval.py', '--workdir', workdir, '--split', 'validation', '--trust_imports',
                   env=_env(str(tmp_path)))
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  (line,) = evaluated.stdout.strip().splitlines()
  assert json.loads(line)['count'] == 20
  # load_run runs no code of a run directory unasked: refused naming the module, then loaded
  # with trust_imports=True, or once the caller imported the module itself.
  code = ('import sys; from poolformers_jax import load_run\n'
          'try:\n  load_run(sys.argv[1])\nexcept ValueError as e:\n  print(e)\n'
          "print('lab.my_mixer' in sys.modules)\n"
          "run = load_run(sys.argv[1], trust_imports=True)\n"
          "print(run.predict(['[MAX 2 9 ]'])[0] in range(10))\n"
          'import lab.my_mixer\nprint(load_run(sys.argv[1]).step)\n'
          'from poolformers_jax import testing\n'
          'from poolformers_jax.config.run_file import load_saved_config\n'
          'from poolformers_jax.config.validate import check_config\n'
          'from poolformers_jax.data import get_dataset_info, settings\n'
          'from poolformers_jax.layers.registry import build_mixer, mixer_table_row\n'
          "print(testing.check_mixer(build_mixer('fixture_mean_mixer')))\n"
          "print(mixer_table_row('fixture_mean_mixer'))\n"
          'config = load_saved_config(sys.argv[1])\n'
          'config.length_buckets.multiple = 8\n'
          'info = get_dataset_info(settings(config.data))\n'
          "check_config(config, info, devices=2)\nprint('valid')\n")
  loaded = subprocess.run([sys.executable, '-c', code, workdir], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env=_env(str(tmp_path)))
  assert loaded.returncode == 0, loaded.stderr[-3000:]
  printed = loaded.stdout.splitlines()
  assert printed[:4] == [
      f"{workdir}/config.json names modules to import, ['lab.my_mixer'] (config.imports), that "
      'this command did not: a run directory runs no code unasked; pass --trust_imports if you '
      'trust this run (load_run(..., trust_imports=True) in Python), or import them yourself '
      '(--config with --config.imports=...; in Python, import them first)', 'False', 'True', '3']
  report = ast.literal_eval(printed[4])
  assert report.pop('dropout') == 'skipped: no dropout inside (dropout_rate is unused)'
  assert report.pop('causal') == 'skipped: not declared causal'
  assert report.pop('bfloat16') == 'skipped: the mixer has no `dtype` field'
  assert set(report.values()) == {'ok'} and 'padding_amount' in report, report
  assert printed[5:] == ['| `fixture_mean_mixer` | `MeanMixer` | `[B, L, D]` → `[B, L, D]` | '
                         'yes | no | no | no (a test mixer) |', 'valid']
  # Without the module on the path: one line naming it, before anything is built.
  unknown = _run('train.py', '--config', 'configs/lra_listops.py:transformer,tiny', '--workdir',
                 str(tmp_path / 'other'), *overrides, '--config.imports=no_such_mixers',
                 env=_env())
  assert unknown.returncode == 2 and unknown.stderr.count('\n') == 1, unknown.stderr[-3000:]
  assert unknown.stderr.startswith("error: config.imports: no module 'no_such_mixers'")


def test_installed_plugin_registers_through_its_entry_point(tmp_path):
  """A distribution whose metadata declares `[poolformers_jax.mixers] mean = my_mixer` (as
  pip install writes it): the mixer registry loads it with the package's own mixers."""
  info = tmp_path / 'fixture_plugin-0.1.dist-info'
  info.mkdir()
  (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: fixture-plugin\nVersion: 0.1\n')
  (info / 'entry_points.txt').write_text('[poolformers_jax.mixers]\nmean = my_mixer\n')
  code = ('import sys; from poolformers_jax.registry import MIXERS\n'
          "assert 'my_mixer' not in sys.modules\n"
          "print('fixture_mean_mixer' in MIXERS, 'ponet' in MIXERS)")
  found = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                         timeout=300, env=_env(str(tmp_path), FIXTURES))
  assert found.returncode == 0, found.stderr[-3000:]
  assert found.stdout.split() == ['True', 'True']


MARKER_MODULE = """import os
with open(os.environ['POOLFORMERS_TEST_MARKER'], 'a') as f:
  f.write('imported\\n')
"""


def test_a_run_directory_from_elsewhere_runs_no_code_unless_trusted(data_dir, tmp_path):
  """A run's config.json edited to name an importable module whose import writes a marker file:
  every program that reads the run refuses it in one line naming the module and --trust_imports,
  and the marker does not appear; with --trust_imports, or with the command's own
  --config.imports, eval.py imports it and evaluates."""
  workdir = str(tmp_path / 'run')
  overrides = tiny_overrides(data_dir, num_train_steps=2, eval_every_steps=2,
                             checkpoint_every_steps=2, final_test=False)
  train_and_evaluate(tiny_config(data_dir, **overrides), workdir)
  path = os.path.join(workdir, 'config.json')
  with open(path) as f:
    saved = json.load(f)
  with open(path, 'w') as f:
    json.dump({**saved, 'imports': 'side_effect'}, f)
  (tmp_path / 'modules').mkdir()
  (tmp_path / 'modules' / 'side_effect.py').write_text(MARKER_MODULE)
  marker = tmp_path / 'marker'
  own_config = ['--config', 'configs/lra_listops.py:transformer,tiny',
                *[f'--config.{k}={v}' for k, v in overrides.items()]]
  refused = {
      'eval.py': ['eval.py', '--workdir', workdir],
      'average': ['-m', 'poolformers_jax.average', '--workdir', workdir],
      'router_load': ['-m', 'poolformers_jax.router_load', '--workdir', workdir],
      'convert --to hf': ['-m', 'poolformers_jax.convert', '--to', 'hf', '--source', workdir,
                          '--workdir', str(tmp_path / 'hf')],
  }
  trusted = {
      '--trust_imports': ['eval.py', '--workdir', workdir, '--split', 'validation',
                          '--trust_imports'],
      '--config.imports': ['eval.py', '--workdir', workdir, '--split', 'validation', *own_config,
                           '--config.imports=side_effect'],
      'own --config': ['eval.py', '--workdir', workdir, '--split', 'validation', *own_config],
  }
  proc = subprocess.run([sys.executable, os.path.join(REPO, 'tests', 'commands.py'), 'run'],
                        input=json.dumps([*refused.values(), *trusted.values()]),
                        capture_output=True, text=True, cwd=REPO, timeout=900,
                        env={**_env(str(tmp_path / 'modules')), 'JAX_PLATFORMS': 'cpu',
                             'POOLFORMERS_TEST_MARKER': str(marker)})
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = dict(zip([*refused, *trusted], json.loads(proc.stdout)))
  for name in refused:
    result = results[name]
    assert result['code'] == 2, (name, result['stderr'][-3000:])
    (line,) = result['stderr'].splitlines()
    assert line.startswith(f"error: {path} names modules to import, ['side_effect'] "
                           '(config.imports), that this command did not: a run directory runs '
                           'no code unasked; pass --trust_imports if you trust this run'), line
  for name in trusted:
    result = results[name]
    assert result['code'] == 0, (name, result['stderr'][-3000:])
    assert json.loads(result['stdout'].splitlines()[-1])['count'] == 20
  # Imported by the two commands that asked for it, by nothing else.
  assert marker.read_text() == 'imported\n' * 2
