"""The package's layers, read from its imports (ast): layers/ build on nothing but the registry,
models/ on layers/, and neither imports data/ or train/ (a model is usable without the trainer)."""
import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       'poolformers_jax')
# folder -> the parts of poolformers_jax its files may import (poolformers_jax.<part>...).
ALLOWED = {
    'layers': ('layers', 'registry'),
    'models': ('layers', 'models', 'registry'),
}


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


def violations(folder: str, files: dict[str, str]) -> list[str]:
  """'path:line imports name' for every import of poolformers_jax outside ALLOWED[folder]."""
  bad = []
  for path, source in sorted(files.items()):
    module = 'poolformers_jax.' + path[:-len('.py')].replace('/', '.')
    for line, name in imported_names(source, module):
      parts = name.split('.')
      if parts[0] == 'poolformers_jax' and len(parts) > 1 and parts[1] not in ALLOWED[folder]:
        bad.append(f'poolformers_jax/{path}:{line} imports {name}; {folder}/ may import only '
                   f'poolformers_jax.{{{", ".join(ALLOWED[folder])}}}')
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
  assert len(files) > 3
  assert violations(folder, files) == []


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
