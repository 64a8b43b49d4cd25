"""The package's layers, read from its imports (ast): layers/ build on nothing but the registry,
models/ on layers/, and neither imports data/ or train/ (a model is usable without the trainer);
data/ imports neither models/ nor train/ (what a model must know of the data travels in
DatasetInfo); tasks/ (loss, metrics, decoding) on data/ and models/, never on the trainer;
weights/ (official weights) on models/ only; trainer/ (setup, steps, checkpoints) on everything
but the programs, which import it and each other's functions, never the other way; config/ (the
one home of configuration) and the config files build on data/'s defaults only (config/ also on
the registry, for `config.imports` and a run's model, and on the one-line errors), and loading any
config file
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
    'weights': ('extras', 'models', 'registry', 'weights'),
    'tasks': ('data', 'extras', 'models', 'registry', 'tasks'),
    'trainer': ('config', 'data', 'errors', 'extras', 'layers', 'models', 'registry', 'tasks',
                'trainer', 'weights'),
}
CONFIG_FILES_MAY_IMPORT = ('config',)
# What loading a config must not import: the model, training and input-pipeline stacks.
HEAVY = ('flax', 'grain', 'optax', 'orbax', 'tensorflow', 'tensorflow_datasets')


def imported_names(source: str, module: str) -> list[tuple[int, str]]:
  """(line, dotted name) of every import in `source`, function-level (lazy) ones and
  `importlib.import_module('<a literal name>')` included; relative imports resolved against
  `module` (the file's dotted name). `from a import b` gives 'a.b'."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == 'import_module' and node.args
        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
      found.append((node.lineno, node.args[0].value))
    elif isinstance(node, ast.Import):
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
  """'folder/.../name.py' -> source, for every file under the package's `folder`."""
  files = {}
  for path in sorted(glob.glob(os.path.join(PACKAGE, folder, '**', '*.py'), recursive=True)):
    with open(path, encoding='utf-8') as f:
      files[os.path.relpath(path, PACKAGE).replace(os.sep, '/')] = f.read()
  return files


@pytest.mark.parametrize('folder', sorted(ALLOWED))
def test_imports_follow_the_layers(folder):
  files = _sources(folder)
  assert len(files) >= 2
  assert violations(folder, files) == []


def module_level_imports(source: str) -> set[str]:
  """The dotted names `source` imports outside any function (at import time)."""
  found, stack = set(), list(ast.parse(source).body)
  while stack:
    node = stack.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      continue
    if isinstance(node, ast.Import):
      found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      found |= {f'{node.module}.{alias.name}' for alias in node.names}
    stack.extend(ast.iter_child_nodes(node))
  return found


def test_readers_make_generated_data_without_loading_the_generators_at_import():
  """data/generators/ (data made from a seed) is imported by a reader only inside a function, at
  most one per reader, and only by a reader whose DatasetSpec declares `generated` (the data it
  makes on first use); the generators import no reader that imports them back (no cycle, checked
  above), and the reports on generated data are benchmarks that no module of the package
  imports."""
  generators = 'poolformers_jax.data.generators'
  readers = {path: source for path, source in _sources('data').items()
             if not path.startswith('data/generators/')}
  lazy = {}
  for path, source in readers.items():
    module = 'poolformers_jax.' + path[:-len('.py')].replace('/', '.')
    names = [name for _, name in imported_names(source, module) if name.startswith(generators)]
    assert not any(n.startswith(generators) for n in module_level_imports(source)), path
    if names:
      lazy[path] = names
      assert 'generated=' in source, f'{path} imports {names} but declares no generated data'
  assert lazy == {'data/listops.py': [f'{generators}.listops'],
                  'data/lra_pathfinder.py': [f'{generators}.pathfinder']}
  reports = {os.path.splitext(os.path.basename(p))[0]
             for p in glob.glob(os.path.join(ROOT, 'benchmarks', '*.py'))}
  assert 'pathfinder_report' in reports
  importers = [f'{name} imports {imported}' for name, source in _package_sources().items()
               for _, imported in imported_names(source, name)
               if imported.split('.')[0] in reports]
  assert importers == []
  # The module-level scan sees an import under `if` or `try`, and not one inside a function.
  assert module_level_imports('try:\n  import a.b\nexcept ImportError:\n  pass\n'
                              'def f():\n  from c import d\n') == {'a.b'}


def test_each_data_file_registers_one_dataset():
  """One dataset per file: no module of data/ calls register_dataset twice (a family of names
  read by one reader, enwik8 / text8 or cifar10 / cifar100 / imagenet2012, registers in one
  loop)."""
  calls = {path: sum(isinstance(node, ast.Call)
                     and getattr(node.func, 'attr', getattr(node.func, 'id', None))
                     == 'register_dataset' for node in ast.walk(ast.parse(source)))
           for path, source in _sources('data').items()}
  assert {path for path, count in calls.items() if count > 1} == set()
  assert sum(calls.values()) >= 12 and calls['data/listops.py'] == 1


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
REPLACED = (('configs_lib',), ('config.py',), ('train', 'config_utils.py'),
            ('train', 'validate.py'))


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


def test_each_program_is_one_module_of_the_top_package():
  """`python -m poolformers_jax.<program>` runs poolformers_jax/<program>.py itself: no folder of
  the package holds a `__main__.py` (a shim) or only one module, and the console script's table
  names modules that exist and define `main`."""
  from poolformers_jax import __main__ as console  # pylint: disable=g-import-not-at-top
  folders = [d for d in sorted(os.listdir(PACKAGE))
             if os.path.isfile(os.path.join(PACKAGE, d, '__init__.py'))]
  assert 'trainer' in folders and 'layers' in folders
  shims = [d for d in folders if os.path.exists(os.path.join(PACKAGE, d, '__main__.py'))]
  thin = [d for d in folders if d != 'configs' and len(
      [n for n in os.listdir(os.path.join(PACKAGE, d)) if n.endswith('.py')
       and n != '__init__.py']) < 2]
  assert (shims, thin) == ([], [])
  for program in console.PROGRAMS:
    path = os.path.join(PACKAGE, program + '.py')
    with open(path, encoding='utf-8') as f:
      source = f.read()
    assert 'def main(' in source and "if __name__ == '__main__':" in source, path


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


def _package_sources() -> dict[str, str]:
  """dotted module name -> source, for every file of the package (a package as its __init__)."""
  sources = {}
  for path in glob.glob(os.path.join(PACKAGE, '**', '*.py'), recursive=True):
    name = 'poolformers_jax.' + os.path.relpath(path, PACKAGE)[:-len('.py')].replace(os.sep, '.')
    with open(path, encoding='utf-8') as f:
      sources[name] = f.read()
  return sources


def import_graph(sources: dict[str, str], walks: dict[str, list[str]]) -> dict[str, set[str]]:
  """module -> the modules it imports (lazy ones included; `from a import b`: a.b if that is a
  module, else a; a package is its `.__init__`), plus `walks`: module -> the modules it imports by
  a walk (the registries'). Python's import of a module's parent packages is not an edge."""
  names = {name[:-len('.__init__')] if name.endswith('.__init__') else name: name
           for name in sources}

  def resolve(dotted):
    parts = dotted.split('.')
    while parts and '.'.join(parts) not in names:
      parts.pop()
    return names.get('.'.join(parts))

  graph = {name: set(walks.get(name, ())) for name in sources}
  for name, source in sources.items():
    for _, imported in imported_names(source, name):
      target = resolve(imported)
      if target and target != name:
        graph[name].add(target)
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The import cycles of `graph` (its strongly connected components of two or more modules)."""
  index, low, stack, found, counter = {}, {}, [], [], [0]

  def visit(node):
    index[node] = low[node] = counter[0]
    counter[0] += 1
    stack.append(node)
    for other in sorted(graph[node]):
      if other not in index:
        visit(other)
        low[node] = min(low[node], low[other])
      elif other in stack:
        low[node] = min(low[node], index[other])
    if low[node] == index[node]:
      component = [stack.pop()]
      while component[-1] != node:
        component.append(stack.pop())
      if len(component) > 1:
        found.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return found


def registry_walks(sources: dict[str, str]) -> dict[str, list[str]]:
  """The module that installs the registries' loader (`set_loader(...)`) -> every module the
  walk imports: those under a kind's subpackage whose text calls register_<kind>(."""
  from poolformers_jax import registry
  (walker,) = [name for name, source in sources.items() if any(
      isinstance(n, ast.Call) and getattr(n.func, 'attr', getattr(n.func, 'id', '')) == 'set_loader'
      for n in ast.walk(ast.parse(source)))]
  return {walker: sorted(name for name, source in sources.items() for kind, package in
                         registry.PACKAGES.items()
                         if name.rsplit('.', 1)[0] == package and f'register_{kind}(' in source)}


def test_no_import_cycle_lazy_imports_and_the_registries_walk_included():
  """Import cycles over the whole package, counting function-level imports, literal
  importlib.import_module calls and the registries' walk: none. The registry module imports no
  file of any kind, and the walk lives above every kind."""
  sources = _package_sources()
  walks = registry_walks(sources)
  assert {'poolformers_jax.layers.ponet', 'poolformers_jax.models.vit',
          'poolformers_jax.data.listops', 'poolformers_jax.data.glue',
          'poolformers_jax.tasks.text'} <= set(
              *walks.values()), walks
  assert cycles(import_graph(sources, walks)) == []
  # The check sees a cycle through a lazy import, and through the walk had the registry run it.
  lazy = {'poolformers_jax.a': 'def f():\n  from poolformers_jax import b\n',
          'poolformers_jax.b': 'import importlib\nimportlib.import_module("poolformers_jax.a")\n'}
  assert cycles(import_graph(lazy, {})) == [['poolformers_jax.a', 'poolformers_jax.b']]
  assert cycles(import_graph(sources, {'poolformers_jax.registry': [
      'poolformers_jax.layers.ponet']})) != []


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
