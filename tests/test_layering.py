"""The package's layers, read from its imports (ast): layers/ build on nothing but the registry,
models/ on layers/, and neither imports data/ or train/ (a model is usable without the trainer);
data/ imports neither models/ nor train/ (what a model must know of the data travels in
DatasetInfo); tasks/ (loss, metrics, decoding) on data/ and models/, never on the trainer;
conversion/ (other frameworks' checkpoints) on models/ only; config/ (the one home of
configuration) and the config files build on data/'s defaults only (config/ also on the registry,
for `config.imports` and a run's model, and on the one-line errors), and loading any config file
imports no flax, grain, optax or orbax (checked in a fresh interpreter). The modules config/
replaced are gone."""
import ast
import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, 'poolformers_jax')
# folder -> the parts of poolformers_jax its files may import (poolformers_jax.<part>...).
ALLOWED = {
    'layers': ('layers', 'registry'),
    'models': ('layers', 'models', 'registry'),
    'data': ('data', 'errors', 'extras', 'registry'),   # extras: the one-line missing-extra check
    'config': ('config', 'data', 'errors', 'registry'),
    'conversion': ('conversion', 'extras', 'models', 'registry'),
    'tasks': ('data', 'extras', 'models', 'registry', 'tasks'),
}
CONFIG_FILES_MAY_IMPORT = ('config',)
# What loading a config must not import: the model, training and input-pipeline stacks.
HEAVY = ('flax', 'grain', 'optax', 'orbax', 'tensorflow', 'tensorflow_datasets')


def imported_names(source: str, module: str) -> list[tuple[int, str]]:
  """(line, dotted name) of every import in `source`, function-level ones included; relative
  imports resolved against `module` (the file's dotted name). `from a import b` gives 'a.b'."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      found += [(node.lineno, alias.name) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        parent = module.split('.')[:-node.level]
        base = '.'.join(parent + ([base] if base else []))
      found += [(node.lineno, f'{base}.{alias.name}') for alias in node.names]
  return sorted(found)


def violations(folder: str, files: dict[str, str],
               allowed: tuple[str, ...] | None = None) -> list[str]:
  """'path:line imports name' for every import of poolformers_jax outside `allowed` (default
  ALLOWED[folder]); `files` maps paths inside the package (or, for configs/, the repository)."""
  allowed = ALLOWED[folder] if allowed is None else allowed
  inside = folder in ALLOWED
  bad = []
  for path, source in sorted(files.items()):
    module = ('poolformers_jax.' if inside else '') + path[:-len('.py')].replace('/', '.')
    for line, name in imported_names(source, module):
      parts = name.split('.')
      if parts[0] == 'poolformers_jax' and len(parts) > 1 and parts[1] not in allowed:
        bad.append(f'{"poolformers_jax/" if inside else ""}{path}:{line} imports {name}; '
                   f'{folder}/ may import only poolformers_jax.{{{", ".join(allowed)}}}')
  return bad


def _sources(folder: str) -> dict[str, str]:
  files = {}
  for name in sorted(os.listdir(os.path.join(PACKAGE, folder))):
    if name.endswith('.py'):
      with open(os.path.join(PACKAGE, folder, name), encoding='utf-8') as f:
        files[f'{folder}/{name}'] = f.read()
  return files


@pytest.mark.parametrize('folder', sorted(ALLOWED))
def test_imports_follow_the_layers(folder):
  files = _sources(folder)
  assert len(files) >= 2
  assert violations(folder, files) == []


def _config_files() -> dict[str, str]:
  files = {}
  for path in sorted(glob.glob(os.path.join(ROOT, 'configs', '*.py'))):
    with open(path, encoding='utf-8') as f:
      files[os.path.relpath(path, ROOT)] = f.read()
  return files


def test_config_files_import_only_config():
  files = _config_files()
  assert len(files) > 10
  assert violations('configs', files, CONFIG_FILES_MAY_IMPORT) == []


# Configuration lived in four modules of two subpackages before config/ (issue #48).
REPLACED = (('configs_lib',), ('config.py',), ('train', 'config_utils.py'), ('train', 'validate.py'))


def test_configuration_has_one_home():
  assert [parts for parts in REPLACED if os.path.exists(os.path.join(PACKAGE, *parts))] == []
  assert os.path.isfile(os.path.join(PACKAGE, 'config', '__init__.py'))
  stale = []
  for folder in ('poolformers_jax', 'configs', 'tests', 'benchmarks'):
    for path in glob.glob(os.path.join(ROOT, folder, '**', '*.py'), recursive=True):
      if os.path.abspath(path) == os.path.abspath(__file__):
        continue
      with open(path, encoding='utf-8') as f:
        module = os.path.relpath(path, ROOT)[:-len('.py')].replace('/', '.')
        stale += [f'{os.path.relpath(path, ROOT)}:{line} imports {name}'
                  for line, name in imported_names(f.read(), module)
                  if name.startswith(('poolformers_jax.configs_lib',
                                      'poolformers_jax.train.config_utils',
                                      'poolformers_jax.train.validate'))]
  assert stale == []


def test_no_benchmark_is_named_like_a_package_module():
  """A benchmark script's folder is first on its sys.path: one named like a package module
  (`accelerators`, `length_buckets`, ...) would read as, and import as, that module."""
  stem = lambda path: os.path.splitext(os.path.basename(path))[0]
  package = ({stem(p) for p in glob.glob(os.path.join(PACKAGE, '**', '*.py'), recursive=True)}
             | {os.path.basename(os.path.dirname(p))
                for p in glob.glob(os.path.join(PACKAGE, '**', '__init__.py'), recursive=True)})
  benchmarks = {stem(p) for p in glob.glob(os.path.join(ROOT, 'benchmarks', '*.py'))}
  assert 'length_buckets' in package and 'efficiency' in benchmarks      # the scan finds both
  assert sorted(benchmarks & package) == []


# Loads every config file (its default argument) in one fresh interpreter; after each, the heavy
# modules then imported.
_LOAD_CONFIGS = """
import importlib.util, json, sys
heavy, found = json.loads(sys.argv[1]), {}
for path in sys.argv[2:]:
  spec = importlib.util.spec_from_file_location('config_under_test', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  assert config.model and config.data.name, path
  found[path] = sorted(name for name in heavy if name in sys.modules)
print(json.dumps(found))
"""


def test_loading_any_config_imports_no_flax_grain_optax_or_orbax():
  paths = sorted(_config_files())
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
  out = subprocess.run([sys.executable, '-c', _LOAD_CONFIGS, json.dumps(HEAVY), *paths],
                       cwd=ROOT, env=env, capture_output=True, text=True, check=True)
  found = json.loads(out.stdout.strip().splitlines()[-1])
  assert found == {path: [] for path in paths}


def test_the_check_names_every_offending_import():
  """The rule catches module-level, function-level, `from package import x` and relative
  imports, and names the file and line."""
  source = ('from poolformers_jax.layers.common import Array\n'
            'from poolformers_jax.registry import MODELS\n'
            'def f():\n'
            '  from poolformers_jax.train import text_tasks\n'
            'from poolformers_jax import data\n'
            'import poolformers_jax.models.block\n'
            'from ..train import loop\n')
  assert violations('layers', {'layers/x.py': source}) == [
      f'poolformers_jax/layers/x.py:{line} imports {name}; layers/ may import only '
      'poolformers_jax.{layers, registry}'
      for line, name in ((4, 'poolformers_jax.train.text_tasks'), (5, 'poolformers_jax.data'),
                         (6, 'poolformers_jax.models.block'), (7, 'poolformers_jax.train.loop'))]
  assert violations('models', {'models/x.py': source})[0].startswith(
      'poolformers_jax/models/x.py:4 imports poolformers_jax.train.text_tasks')
  assert [v.split(';')[0] for v in violations('data', {'data/x.py': source})] == [
      f'poolformers_jax/data/x.py:{line} imports {name}' for line, name in (
          (1, 'poolformers_jax.layers.common.Array'), (4, 'poolformers_jax.train.text_tasks'),
          (6, 'poolformers_jax.models.block'), (7, 'poolformers_jax.train.loop'))]
  assert violations('configs', {'configs/x.py': 'from poolformers_jax.models import vit\n'},
                    CONFIG_FILES_MAY_IMPORT) == [
      'configs/x.py:1 imports poolformers_jax.models.vit; configs/ may import only '
      'poolformers_jax.{config}']
