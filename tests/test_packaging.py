"""The wheel as a user installs it: `python -m build` (sdist + wheel, `twine check` clean), then
used from an empty directory outside the source tree:
- with `[train]`, offline (the wheel with --no-index --no-deps into a fresh venv that sees this
  environment's packages): the README's install-only path, `python -m poolformers_jax.train
  --config lra_listops:ponet,tiny`, `python -m poolformers_jax.eval`, `load_run(...).predict`
  and `config.load('configs/lra_listops.py:ponet,small')` on the shipped configs, the metadata
  `pip show` prints and the `poolformers-jax` console script;
- with no extras, from the package index constrained to the lock (requirements.txt, so it installs
  what the suite runs on; pip's cache makes it quick after the first run; skipped when no index is
  reachable): the core is small (no trainer packages), the README's layer example and the
  numerics kit run, the run trained above predicts the same classes, the trainer fails in one
  line naming the extra; then with `[all]`,
  `python -m poolformers_jax.summary` on an installed config file."""
import glob
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the core must not pull in (the `train` / `text` / `convert` extras' packages).
NOT_CORE = ('grain', 'tensorflow_datasets', 'tqdm', 'tensorboardX', 'matplotlib', 'PIL',
            'sentencepiece', 'tokenizers', 'sacrebleu', 'sacremoses', 'safetensors')


def _run(argv, **kwargs):
  return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope='module')
def dist(tmp_path_factory):
  pytest.importorskip('build', reason='needs requirements-test.txt (build, twine)')
  out = tmp_path_factory.mktemp('dist')
  # --no-isolation: setuptools from this environment (pinned), so the build needs no network.
  built = _run([sys.executable, '-m', 'build', '--no-isolation', '--outdir', str(out), ROOT])
  assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
  files = sorted(glob.glob(str(out / '*')))
  assert [os.path.basename(f).split('-')[0] for f in files] == ['poolformers_jax'] * 2, files
  checked = _run([sys.executable, '-m', 'twine', 'check', '--strict', *files])
  assert checked.returncode == 0, checked.stdout + checked.stderr
  return {f.rsplit('.', 1)[-1] if f.endswith('.whl') else 'sdist': f for f in files}


def test_wheel_has_every_package_the_configs_and_py_typed(dist):
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    listed = set(tomllib.load(f)['tool']['setuptools']['packages'])
  source = {os.path.relpath(d, ROOT).replace(os.sep, '.') for d, _, files in
            os.walk(os.path.join(ROOT, 'poolformers_jax')) if '__init__.py' in files}
  assert source <= listed, f'add to [tool.setuptools] packages: {sorted(source - listed)}'
  names = zipfile.ZipFile(dist['whl']).namelist()
  configs = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, 'configs', '*.py'))}
  assert {n.split('/')[-1] for n in names if n.startswith('poolformers_jax/configs/')} == configs
  assert 'poolformers_jax/py.typed' in names
  assert 'poolformers_jax/experiments/papers.json' in names   # the papers' numbers: package data
  assert not [n for n in names if n.startswith(('tests/', 'benchmarks/'))]


def _readme_layer_example() -> str:
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    section = f.read().split('## PoNet in your own Flax model', 1)[1]
  return re.search(r'```python\n(.*?)```', section, re.S).group(1)


USER_CODE = textwrap.dedent('''
  import importlib.metadata, importlib.util, os, sys
  import poolformers_jax
  assert 'site-packages' in poolformers_jax.__file__, poolformers_jax.__file__
  assert poolformers_jax.__version__ == importlib.metadata.version('poolformers_jax')
  assert not [m for m in {not_core!r} if importlib.util.find_spec(m)], 'not core'
  {readme}
  assert y.shape == (2, 128, 64)
  from poolformers_jax import testing
  from poolformers_jax.layers import PoNet
  x, mask = testing.random_inputs(0, 2, 32, 16, num_real=[32, 20])
  testing.assert_padding_values_irrelevant(PoNet(num_heads=2, segment_num=4), x, mask)
  testing.assert_jit_matches(PoNet(num_heads=2, segment_num=4), x, mask)
  configs = os.path.join(os.path.dirname(poolformers_jax.__file__), 'configs')
  assert os.path.isfile(os.path.join(configs, 'lra_listops.py'))
  run = poolformers_jax.load_run({run!r})   # trained with [train]; read and used without it
  print('PREDICTED:', [int(p) for p in run.predict(['[MAX 2 9 [MIN 4 7 ] 0 ]', '[SM 1 2 ]'])])
  try:
    from poolformers_jax.train import train_and_evaluate
  except ModuleNotFoundError as error:
    print('TRAIN:', error)
''')


# From an empty directory, after the two programs ran: the run predicts, a shipped config loads
# by the README's name, and none of this defined an absl flag or started jax.distributed.
RUN_CODE = textwrap.dedent('''
  import importlib.metadata, json, sys
  import jax
  import poolformers_jax
  from poolformers_jax import config as config_lib
  assert 'venv' in poolformers_jax.__file__, poolformers_jax.__file__
  run = poolformers_jax.load_run('r')
  predicted = run.predict(['[MAX 2 9 [MIN 4 7 ] 0 ]', '[SM 1 2 ]'])
  config = config_lib.load('configs/lra_listops.py:ponet,small')
  absl = sys.modules.get('absl.flags')
  print(json.dumps({'predicted': [int(p) for p in predicted], 'model': config.model.name,
                    'mixer': config.model.mixer,
                    'flags': sorted(set(absl.FLAGS) & {'config', 'workdir', 'verbose_errors',
                                                      'distributed'}) if absl else [],
                    'distributed': jax.distributed.is_initialized(),
                    'license': importlib.metadata.metadata('poolformers_jax')[
                        'License-Expression']}))
''')


def _venv(path, env):
  assert _run([sys.executable, '-m', 'venv', str(path)], env=env).returncode == 0
  return str(path / 'bin' / 'python')


@pytest.mark.slow
def test_wheel_trains_from_an_empty_directory_then_installs_without_extras_then_with_all(dist,
                                                                                         tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'XLA_FLAGS')}
  cpu = {**env, 'JAX_PLATFORMS': 'cpu'}
  # [train], offline: this environment's packages (a .pth path line: its own .pth files, an
  # editable install of the checkout among them, are not read), the wheel installed over them.
  python = _venv(tmp_path / 'train_venv', env)
  site = _run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
              env=env).stdout.strip()
  ours = [p for p in sys.path if p.endswith('site-packages') and os.path.isdir(p)]
  with open(os.path.join(site, 'outer_environment.pth'), 'w') as f:
    f.write('\n'.join(ours) + '\n')
  installed = _run([python, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps',
                    dist['whl'] + '[train]'], env=env)
  assert installed.returncode == 0, installed.stderr[-3000:]
  empty = tmp_path / 'empty'
  empty.mkdir()
  trained = _run([python, '-m', 'poolformers_jax.train', '--config', 'lra_listops:ponet,tiny',
                  '--workdir', 'r', '--config.num_train_steps=4',
                  '--config.eval_every_steps=4'],
                 cwd=empty, env=cpu)
  assert trained.returncode == 0, trained.stderr[-3000:]
  evaluated = _run([python, '-m', 'poolformers_jax.eval', '--workdir', 'r', '--config',
                    'configs/lra_listops.py:ponet,tiny', '--split', 'validation'],
                   cwd=empty, env=cpu)
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  metrics = json.loads(evaluated.stdout.strip().splitlines()[-1])
  assert (metrics['split'], metrics['step']) == ('validation', 4), metrics
  used = json.loads(_run([python, '-c', RUN_CODE], cwd=empty, env=cpu).stdout.splitlines()[-1])
  predicted = used.pop('predicted')
  assert [0 <= p < 10 for p in predicted] == [True, True]   # ListOps values 0..9
  assert used == {'model': 'lra_encoder', 'mixer': 'ponet', 'flags': [], 'distributed': False,
                  'license': 'Apache-2.0'}
  assert sorted(os.listdir(empty)) == ['data_cache', 'r']   # nothing written beside the run
  # pip show (pip < 25.1 prints License-Expression nowhere: read above from the metadata)
  shown = _run([python, '-m', 'pip', 'show', '-v', 'poolformers_jax'], env=env).stdout
  assert 'Author: The poolformers_jax authors' in shown, shown
  assert 'Topic :: Scientific/Engineering :: Artificial Intelligence' in shown, shown
  assert 'poolformers-jax = poolformers_jax.__main__:main' in shown, shown
  script = os.path.join(os.path.dirname(python), 'poolformers-jax')   # the console script
  helped = _run([script, '--help'], cwd=empty, env=cpu)   # dispatch: tests/train/test_errors.py
  assert helped.returncode == 0 and helped.stderr.startswith(
      'usage: poolformers-jax '
      '<train|eval|summary|reproduce|average|translate|generate|router_load|convert>'), helped

  venv = tmp_path / 'venv'
  assert _run([sys.executable, '-m', 'venv', str(venv)], env=env).returncode == 0
  python = str(venv / 'bin' / 'python')
  installed = _run([python, '-m', 'pip', 'install', '-q', '-c',
                    os.path.join(ROOT, 'requirements.txt'), dist['whl']], env=env)
  if installed.returncode and re.search(r'NewConnectionError|Temporary failure in name resolution',
                                        installed.stderr):
    pytest.skip('the [train] install trained and predicted; no package index reachable for the '
                'core install: ' + installed.stderr.strip().splitlines()[-1])
  assert installed.returncode == 0, installed.stderr[-3000:]
  code = USER_CODE.format(not_core=NOT_CORE, readme=textwrap.indent(_readme_layer_example(), ''),
                          run=str(empty / 'r'))
  result = _run([python, '-c', code], cwd=tmp_path, env={**env, 'JAX_PLATFORMS': 'cpu'})
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().splitlines()[-2] == f'PREDICTED: {predicted}'   # as with [train]
  assert result.stdout.strip().splitlines()[-1] == (
      "TRAIN: poolformers_jax.train needs grain, tensorflow_datasets, PIL: "
      "pip install 'poolformers_jax[train]'")
  # With [all]: the summary tool on a config file given by path (the installed copy).
  installed = _run([python, '-m', 'pip', 'install', '-q', '-c',
                    os.path.join(ROOT, 'requirements.txt'), dist['whl'] + '[all]'], env=env)
  assert installed.returncode == 0, installed.stderr[-3000:]
  config = _run([python, '-c', 'import os, poolformers_jax; print(os.path.join(os.path.dirname('
                 'poolformers_jax.__file__), "configs", "lra_listops.py"))'], cwd=tmp_path,
                env=env).stdout.strip()
  summary = _run([python, '-m', 'poolformers_jax.summary', '--config', f'{config}:linear,tiny'],
                 cwd=tmp_path, env={**env, 'JAX_PLATFORMS': 'cpu'})
  assert summary.returncode == 0, summary.stderr[-3000:]
  assert json.loads(summary.stdout.splitlines()[-1])['model'] == 'lra_encoder'


# The core install simulated in this environment: the train extra's readers cannot be found.
CORE_ONLY = textwrap.dedent('''
  import importlib.abc, importlib.util, json, sys
  BLOCKED = {not_core!r}
  class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
      if name.split('.')[0] in BLOCKED:
        raise ModuleNotFoundError(f'No module named {{name!r}}', name=name)
  sys.meta_path.insert(0, Blocked())
  find_spec = importlib.util.find_spec
  importlib.util.find_spec = lambda name, *a: (None if name.split('.')[0] in BLOCKED
                                               else find_spec(name, *a))
  import jax
  from poolformers_jax import config as config_lib, models
  config = config_lib.complete(config_lib.load('configs/lra_listops.py:ponet,small'),
                               need_files=False)
  model = models.build_model(config.model)
  tokens = jax.numpy.ones((2, config.model.max_length), jax.numpy.int32)
  logits = model.apply(model.init(jax.random.PRNGKey(0), tokens), tokens)
  try:
    from poolformers_jax.train import train_and_evaluate
    trainer = 'imported'
  except ModuleNotFoundError as error:
    trainer = str(error)
  print(json.dumps({{'logits': list(logits.shape), 'trainer': trainer,
                    'loaded': sorted({{m.split('.')[0] for m in sys.modules}} & set(BLOCKED))}}))
''')


def test_a_shipped_config_loads_and_its_model_builds_on_the_core_install(tmp_path):
  """config.load by the README's name, complete from the dataset's constants, build_model and
  a forward pass with no package of the extras importable; the trainer names its extra."""
  code = CORE_ONLY.format(not_core=NOT_CORE)
  out = _run([sys.executable, '-c', code], cwd=tmp_path,
             env={**os.environ, 'JAX_PLATFORMS': 'cpu', 'PYTHONPATH': ROOT})
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got == {'logits': [2, 10], 'loaded': [],
                 'trainer': "poolformers_jax.train needs grain, tensorflow_datasets, PIL: pip "
                            "install 'poolformers_jax[train]'"}


def test_one_version_string():
  """poolformers_jax/_version.py is the version; pyproject.toml reads it, CITATION.cff repeats
  it."""
  import poolformers_jax  # pylint: disable=g-import-not-at-top
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    project = tomllib.load(f)
  assert 'version' in project['project']['dynamic'] and 'version' not in project['project']
  assert project['tool']['setuptools']['dynamic']['version'] == {
      'attr': 'poolformers_jax._version.__version__'}
  with open(os.path.join(ROOT, 'CITATION.cff'), encoding='utf-8') as f:
    cited = re.search(r'^version: (\S+)$', f.read(), re.M).group(1)
  assert cited == poolformers_jax.__version__
