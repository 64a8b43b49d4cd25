"""The design bar of issue #48, read from the package's source (nothing is imported but
trainer/transforms.py): no class over 150 lines, no test seam left in as a global, and the
training step free of platform-specific program transforms."""
import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'poolformers_jax'
MAX_CLASS_LINES = 150
GONE = ('HOT_PATH_GUARD', 'rolled_threefry_on_cpu', '_clock')


def _sources():
  files = sorted(PACKAGE.rglob('*.py'))
  assert len(files) > 50, f'{PACKAGE} looks empty'
  return [(path.relative_to(PACKAGE.parent).as_posix(), path.read_text()) for path in files]


def _classes(text: str):
  for node in ast.walk(ast.parse(text)):
    if isinstance(node, ast.ClassDef):
      first = min([node.lineno] + [d.lineno for d in node.decorator_list])
      yield node.name, node.end_lineno - first + 1


def test_no_class_is_over_150_lines():
  too_long = [f'{path}: class {name} has {lines} lines'
              for path, text in _sources() for name, lines in _classes(text)
              if lines > MAX_CLASS_LINES]
  assert not too_long, (f'classes over {MAX_CLASS_LINES} lines (split them into smaller '
                        'classes):\n' + '\n'.join(too_long))


def test_the_class_walk_counts_lines_as_written():
  text = 'class A:\n' + '  x = 1\n' * 200 + '\n\n@dec\nclass B:\n  class C:\n    pass\n'
  assert dict(_classes(text)) == {'A': 201, 'B': 4, 'C': 2}


@pytest.mark.parametrize('name', GONE)
def test_removed_seams_appear_nowhere_in_the_package(name):
  pattern = re.compile(rf'(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])')
  hits = [f'{path}:{i}' for path, text in _sources()
          for i, line in enumerate(text.splitlines(), start=1) if pattern.search(line)]
  assert not hits, f'{name} is back in the package: {hits}'


def test_the_step_defines_no_cpu_only_transform():
  from poolformers_jax.trainer import transforms
  moved = {f.__name__ for fs in transforms.INTERCEPTORS.values() for f in fs} | {'stored_once'}
  assert {'dense_on_rows', 'dropout_mask_once'} <= moved
  transforms_tree = ast.parse((PACKAGE / 'trainer' / 'transforms.py').read_text())
  assert moved <= {n.name for n in ast.walk(transforms_tree) if isinstance(n, ast.FunctionDef)}

  tree = ast.parse((PACKAGE / 'trainer' / 'step.py').read_text())
  defined = {n.name for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
  assert not defined & moved, f'trainer/step.py defines {sorted(defined & moved)}'
  names = {n.attr if isinstance(n, ast.Attribute) else n.id
           for n in ast.walk(tree) if isinstance(n, (ast.Attribute, ast.Name))}
  assert 'intercept_methods' not in names, 'trainer/step.py intercepts flax methods itself'
  platforms = {n.value.lower() for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}
  assert not platforms & {'cpu', 'gpu', 'cuda', 'rocm', 'tpu'}, (
      'trainer/step.py names a platform: its platform-specific choices belong in '
      'trainer/transforms.py')



def branch_on(name: str) -> re.Pattern:
  """`== 'name'`, `!= "name"`, `in ('a', 'name', ...)` (or [...] / {...}): code choosing by a
  registered name."""
  quoted = rf"""['"]{re.escape(name)}['"]"""
  return re.compile(rf"""(?:==|!=)\s*{quoted}|\bin\s*[(\[{{]\s*(?:['"][\w.-]*['"]\s*,\s*)*"""
                    rf'{quoted}')


def test_no_code_branches_on_a_datasets_name_outside_its_file():
  """What run.py / reproduce know of a dataset is its registration's (DatasetSpec.record,
  run_files, generated): its name is compared only in the file that registers it."""
  from poolformers_jax.data import DATASETS
  homes = {name: 'poolformers_jax/' + DATASETS[name].defaults.__module__.split('.', 1)[1].replace(
      '.', '/') + '.py' for name in DATASETS}
  assert homes['wmt14'] == 'poolformers_jax/data/translation.py' and len(homes) >= 15
  hits = {name: [f'{path}:{i}' for path, text in _sources() if path != home
                 for i, line in enumerate(text.splitlines(), start=1)
                 if branch_on(name).search(line)]
          for name, home in homes.items()}
  assert not {name: where for name, where in hits.items() if where}
  # The pattern finds each form (vision.py's own `name == 'imagenet2012'` among them).
  assert any(branch_on('imagenet2012').search(text) for path, text in _sources()
             if path == homes['imagenet2012'])
  for code in ("if name == 'wmt14':", 'x != "wmt14"', "if d.name in ('glue', 'wmt14'):",
               "name in ['wmt14']"):
    assert branch_on('wmt14').search(code), code
  assert not branch_on('wmt14').search("spec = DATASETS['wmt14']  # 'wmt14_x' == y")


def repeated_blocks(sources: dict[str, str], size: int = 6) -> dict[tuple[str, ...], list[str]]:
  """Blocks of `size` consecutive non-blank lines (stripped, each longer than 3 characters; import
  statements left out) that stand in more than one place: {lines: ['path:line', ...]}."""
  places: dict[tuple[str, ...], list[str]] = {}
  for path, text in sources.items():
    imports = {i for node in ast.walk(ast.parse(text))
               if isinstance(node, (ast.Import, ast.ImportFrom))
               for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    lines = [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1)
             if line.strip() and i not in imports]
    for k in range(len(lines) - size + 1):
      block = tuple(line for _, line in lines[k:k + size])
      if all(len(line) > 3 for line in block):
        places.setdefault(block, []).append(f'{path}:{lines[k][0]}')
  return {block: where for block, where in places.items() if len(where) > 1}


def test_no_block_of_six_lines_stands_twice_in_the_package():
  sources = dict(_sources())
  assert len(sources) > 100
  assert repeated_blocks(sources) == {}
  copied = '\n'.join(f'value_{i} = compute({i}, axis=-1)' for i in range(6))
  assert list(repeated_blocks({'a.py': copied, 'b.py': 'x = 1\n' + copied}).values()) == [
      ['a.py:1', 'b.py:2']]
