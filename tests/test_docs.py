"""The documentation points at things that exist.

Every repository path named in README.md, docs/, the package, tests, benchmarks, configs and
notebooks (`docs/design.md`, `poolformers_jax/layers/ponet.py`, `layers/ponet.py` inside the
package, ...) is a file or folder of the repository; every relative markdown link resolves, and
its `#anchor` is a heading of the target; nothing cites notes that live outside the repository;
README.md stays within 265 lines and its results table links every row to its record in
docs/.
"""
import ast
import functools
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, 'README.md')
README_MAX_LINES = 250

SCANNED = ['README.md', 'Makefile', 'requirements.txt', 'pyproject.toml', 'docs/**/*',
           'poolformers_jax/**/*', 'tests/**/*', 'benchmarks/**/*', 'configs/**/*',
           'notebooks/**/*']
TEXT_SUFFIXES = ('.md', '.py', '.ipynb', '.sh', '.txt', '.json', '.toml')
# Files outside the repository that used to be cited; built from parts so this file passes too.
OUTSIDE_NOTES = ('DESIGN' + '.md', 'PAPER' + '_NOTES', 'STACK' + '_NOTES', '../' + 'shared',
                 '/work/' + 'shared')

# A repository path: a top-level folder (or, as the package's docstrings write them, a package
# subfolder) followed by a file name with one of these extensions. Templates (`configs/<task>.py`,
# `corpus/*.txt`) and example run folders (`runs/...`, `/tmp/...`) do not match.
TOP = r'(?:docs|benchmarks|configs|poolformers_jax|tests|notebooks)'
PACKAGE = r'(?:layers|models|data|trainer|config|tasks|weights|experiments)'
EXT = r'(?:md|png|py|json|ipynb|sh|npz|safetensors|txt)'
PATH = re.compile(rf'(?<![\w/.\-])((?:{TOP}|{PACKAGE})/[\w./\-]*\w\.{EXT})(?![\w/])')
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
# Paths that look like ours but are not meant to be in the repository: (file, path) -> why.
NOT_OURS = {
    ('poolformers_jax/config/defaults.py', 'configs/common.py'): "big_vision's file",
    ('poolformers_jax/config/__init__.py', 'configs/x.py'): 'the argument syntax',
    ('poolformers_jax/models/ponet_mlm.py', 'models/modeling_ponet.py'): 'the official PoNet code',
    ('tests/fixtures/make_ponet_fixture.py', 'models/modeling_ponet.py'): 'the official PoNet code',
    ('tests/train/test_errors.py', 'configs/lra_nofile.py'): 'missing on purpose',
    ('tests/train/test_run.py', 'configs/nope.py'): 'missing on purpose',
    ('tests/train/test_robust.py', 'data/process_0-of-1.json'): 'a file inside a checkpoint',
    **{('tests/test_layering.py', path): "the layering check's made-up module"
       for path in ('layers/x.py', 'poolformers_jax/layers/x.py', 'models/x.py',
                    'poolformers_jax/models/x.py', 'data/x.py', 'poolformers_jax/data/x.py',
                    'configs/x.py')},
}


def _files():
  seen = set()
  for pattern in SCANNED:
    for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
      if (os.path.isfile(path) and path not in seen and '.ipynb_checkpoints' not in path
          and '__pycache__' not in path
          and (path.endswith(TEXT_SUFFIXES) or os.path.basename(path) == 'Makefile')):
        seen.add(path)
        yield path


def _text(path):
  try:
    with open(path, encoding='utf-8') as f:
      text = f.read()
  except FileNotFoundError:   # a scratch file another test removed since the scan
    return ''
  if path.endswith('.ipynb'):   # the cells' text, not the JSON escapes around it
    cells = json.loads(text)['cells']
    text = '\n'.join(''.join(cell['source']) for cell in cells)
  return text


FILES = sorted(_files())
RELATIVE = lambda path: os.path.relpath(path, ROOT)


@functools.cache
def _slugs(markdown_path):
  """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats -1, -2."""
  slugs, counts = set(), {}
  in_code = False
  for line in _text(markdown_path).splitlines():
    if line.startswith('```'):
      in_code = not in_code
    match = None if in_code else re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
    if match:
      slug = re.sub(r'[^\w\- ]', '', match.group(1).strip().lower()).replace(' ', '-')
      n = counts.get(slug, 0)
      counts[slug] = n + 1
      slugs.add(slug if n == 0 else f'{slug}-{n}')
  return slugs


def test_the_scan_sees_the_documents_and_the_code():
  names = set(map(RELATIVE, FILES))
  assert {'README.md', 'docs/design.md', 'poolformers_jax/layers/ponet.py',
          'tests/test_docs.py', 'configs/lra_listops.py', 'benchmarks/efficiency.py',
          'notebooks/02_ponet.ipynb'} <= names


def test_every_repository_path_named_exists():
  missing = []
  for path in FILES:
    if path == os.path.abspath(__file__):   # its strings are the pattern's examples
      continue
    for number, line in enumerate(_text(path).splitlines(), 1):
      for ref in PATH.findall(line):
        candidates = [os.path.join(ROOT, ref), os.path.join(ROOT, 'poolformers_jax', ref),
                      os.path.join(os.path.dirname(path), ref)]
        if (RELATIVE(path), ref) not in NOT_OURS and not any(map(os.path.exists, candidates)):
          missing.append(f'{RELATIVE(path)}:{number}: {ref}')
  assert not missing, 'paths that are not in the repository:\n' + '\n'.join(missing)


def test_every_relative_markdown_link_resolves():
  broken = []
  for path in FILES:
    if not path.endswith('.md'):
      continue
    for number, line in enumerate(_text(path).splitlines(), 1):
      for target in LINK.findall(line):
        if re.match(r'[a-z][a-z0-9+.\-]*:', target):   # http:, https:, mailto:
          continue
        file_part, _, anchor = target.partition('#')
        resolved = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                    if file_part else path)
        if not resolved.startswith(ROOT + os.sep) or not os.path.exists(resolved):
          broken.append(f'{RELATIVE(path)}:{number}: {target} (no such file)')
        elif anchor and resolved.endswith('.md') and anchor not in _slugs(resolved):
          broken.append(f'{RELATIVE(path)}:{number}: {target} (no heading #{anchor})')
  assert not broken, 'broken links:\n' + '\n'.join(broken)


def test_nothing_cites_notes_outside_the_repository():
  cited = [f'{RELATIVE(path)}:{number}: {name}'
           for path in FILES
           for number, line in enumerate(_text(path).splitlines(), 1)
           for name in OUTSIDE_NOTES if name in line]
  assert not cited, 'references to files outside the repository:\n' + '\n'.join(cited)


def test_readme_is_short_and_every_result_links_its_record():
  lines = _text(README).splitlines()
  assert len(lines) <= README_MAX_LINES, (
      f'README.md has {len(lines)} lines (at most {README_MAX_LINES})')
  start = lines.index('## Results')
  end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith('## '))
  rows = [line for line in lines[start:end] if line.startswith('|')][2:]   # after header, rule
  assert len(rows) >= 8, 'the results table lost its rows'
  record = re.compile(r'\]\(docs/(results/\w+\.md|efficiency\.md)')
  unlinked = [row for row in rows if not record.search(row)]
  assert not unlinked, 'results without a link to their record in docs/:\n' + '\n'.join(unlinked)
  # The index of every result (docs/results/README.md) holds the README's rows and links each
  # row to its record too.
  index = [line for line in _text(os.path.join(ROOT, 'docs', 'results', 'README.md')).splitlines()
           if line.startswith('|')][2:]
  assert len(index) >= 30 and len(index) > len(rows)
  in_index = re.compile(r'\]\((\w+\.md|\.\./efficiency\.md)')
  assert not [row for row in index if not in_index.search(row)]
  assert {row.split(' | ')[0] for row in rows} <= {row.split(' | ')[0] for row in index}


def test_the_path_pattern_catches_what_it_should():
  found = PATH.findall('see docs/design.md, layers/ponet.py and (tests/test_docs.py); '
                       'not configs/<task>.py, runs/x/config.json, corpus/train/*.txt, '
                       '../../poolformers_jax/registry.py or tests/data/test_listops.pyc')
  assert found == ['docs/design.md', 'layers/ponet.py', 'tests/test_docs.py']


@pytest.mark.parametrize('heading,slug', [
    ('`make train`: the offline default', 'make-train-the-offline-default'),
    ('PoNet, schedule compressed 5× (finished)', 'ponet-schedule-compressed-5-finished'),
    ('Adding a paper', 'adding-a-paper')])
def test_anchor_slugs_follow_github(tmp_path, heading, slug):
  page = tmp_path / 'page.md'
  page.write_text(f'# {heading}\n\n```\n# not a heading\n```\n')
  assert _slugs(str(page)) == {slug}


# ----------------------------------------------------------- every documented command still runs

DOCUMENTS = ['README.md', 'docs/**/*.md', 'notebooks/README.md']
FENCE = re.compile(r'^```(\w*)\n(.*?)^```', re.S | re.M)
# Wrappers in front of a command: what they wrap is checked.
WRAPPERS = {'nice': ('-n',), 'taskset': ('-c',), 'timeout': ()}
PROJECT_PYTHONS = ('python', 'python3', '.venv/bin/python')
SHELL_TOOLS = ('echo', 'cmp', 'git', 'cat', 'mkdir')


def fenced_blocks():
  """(file:line, language, text) of every fenced block of the documents."""
  for pattern in DOCUMENTS:
    for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
      text = _text(path)
      for match in FENCE.finditer(text):
        line = text[:match.start()].count('\n') + 1
        yield f'{RELATIVE(path)}:{line}', match.group(1), match.group(2)


def shell_commands(block: str) -> list[list[str]]:
  """The simple commands of a bash block: continuations joined, comments dropped, split at
  `|`, `&&` and `;`; wrappers (nice, taskset, env assignments) removed."""
  commands = []
  for line in block.replace('\\\n', ' ').splitlines():
    words, current = shlex.split(line, comments=True), []
    for word in words + ['|']:
      if word in ('|', '&&', ';'):
        if current:
          commands.append(current)
        current = []
      else:
        current.append(word)
  unwrapped = []
  for words in commands:
    while words and (re.match(r'^\w+=', words[0]) or words[0] in WRAPPERS):
      options = WRAPPERS.get(words[0], ())
      words = words[1:]
      while words and (words[0] in options or re.match(r'^-?\d+$', words[0])):
        words = words[1:]
    unwrapped.append(words)
  return unwrapped


def _argparse_options(script: str) -> set[str]:
  """The --options a script's argparse parser defines (read, not imported: another venv's)."""
  tree = ast.parse(_text(os.path.join(ROOT, script)))
  return {node.args[0].value for node in ast.walk(tree)
          if isinstance(node, ast.Call) and getattr(node.func, 'attr', '') == 'add_argument'
          and node.args and isinstance(node.args[0], ast.Constant)}


def _pins(path: str) -> dict[str, str]:
  return dict(re.findall(r'^([\w\-\[\]]+)==([^\s#]+)', _text(os.path.join(ROOT, path)), re.M))


def check_outside_python(words: list[str]) -> str | None:
  """What is wrong with a command of a tool or of another environment, or None."""
  program = words[0]
  if program == 'make':
    proc = subprocess.run(['make', '-n', *words[1:]], cwd=ROOT, capture_output=True, text=True)
    return None if proc.returncode == 0 else f'make -n: {proc.stderr.strip()}'
  if program == 'bash':
    script = os.path.join(ROOT, words[1])
    proc = subprocess.run(['bash', '-n', script], capture_output=True, text=True)
    modes = re.search(r'^MODES=\(([^)]*)\)', _text(script), re.M)
    if proc.returncode:
      return f'bash -n: {proc.stderr.strip()}'
    if modes and words[2:3] and words[2] not in modes.group(1).split():
      return f'{words[2]!r} is not one of the modes {modes.group(1)} of {words[1]}'
    return None
  if program in SHELL_TOOLS:
    return None if shutil.which(program) else f'{program} is not installed'
  if program.startswith('.venv-data/'):      # the data-preparation environment (docs/data.md)
    data_pins, pins = _pins('requirements-data.txt'), _pins('requirements.txt')
    differ = [n for n in data_pins if n in pins and data_pins[n] != pins[n]]
    if differ or 'tensorflow-datasets' not in data_pins:
      return f'requirements-data.txt pins {differ} otherwise than requirements.txt'
  if (program == 'pip' or program.endswith('/bin/pip')) and words[1] == 'install':
    loose = [w for w in words[2:] if not w.startswith('-') and '==' not in w
             and not os.path.exists(os.path.join(ROOT, w))
             and not re.fullmatch(r'(\.|poolformers_jax)(\[[a-z,]+\])?', w)]   # ours: its ranges
    return f'unpinned: {loose}' if loose else None
  if program.endswith('/bin/python') and words[1].endswith('.py'):   # another venv's python
    unknown = {w.split('=')[0] for w in words[2:] if w.startswith('--')} - _argparse_options(
        words[1])
    return f'{words[1]} has no options {sorted(unknown)}' if unknown else None
  return f'the docs test does not know how to check {program!r}'


def python_form(words: list[str]) -> list[str] | None:
  """The argv after `python` that the parse runner checks; None for `python -m venv`."""
  argv = words[1:]
  if argv[:2] == ['-m', 'venv']:
    return None
  if argv[:2] == ['-m', 'pytest']:
    return argv + ['--collect-only']
  return argv


def test_every_documented_command_parses_and_starts():
  """Every command of every bash block of README.md and docs/: the entry points read their
  arguments with their own parsers and load their --config with the overrides (reproduce runs
  its --dry_run; pytest collects), one forked process each; tools are checked by `make -n`,
  `bash -n`, pins or presence. Nothing is trained."""
  python, problems, blocks = [], [], 0
  for where, language, block in fenced_blocks():
    if language != 'bash':
      continue
    blocks += 1
    for words in shell_commands(block):
      if words[0] == 'poolformers-jax':        # the console script: python -m <program>
        python.append((where, ['-m', f'poolformers_jax.{words[1]}', *words[2:]]))
      elif words[0] in PROJECT_PYTHONS:
        argv = python_form(words)
        if argv is not None:
          python.append((where, argv))
      else:
        problem = check_outside_python(words)
        if problem:
          problems.append(f'{where}: {shlex.join(words)}: {problem}')
  assert blocks >= 25 and len(python) >= 40, (blocks, len(python))
  proc = subprocess.run([sys.executable, os.path.join(ROOT, 'tests', 'commands.py'), 'parse'],
                        input=json.dumps([argv for _, argv in python]), capture_output=True,
                        text=True, cwd=ROOT, timeout=600,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 0, proc.stderr[-3000:]
  for (where, argv), result in zip(python, json.loads(proc.stdout)):
    if result['code'] != 0:
      problems.append(f'{where}: python {shlex.join(argv)}: exit {result["code"]}: '
                      f'{result["stderr"].strip()[-500:]}')
  assert not problems, 'documented commands that do not run:\n' + '\n'.join(problems)


def test_every_fenced_block_says_what_it_is():
  """Commands are `bash` (run by the test above), code `python`, the rest `text`."""
  unlabelled = [where for where, language, _ in fenced_blocks()
                if language not in ('bash', 'python', 'text')]
  assert not unlabelled, 'fenced blocks without bash / python / text: ' + ', '.join(unlabelled)


def test_the_command_splitter():
  assert shell_commands('nice -n 19 python a.py --x 1 \\\n  --y 2   # note\n'
                        'echo "a b" | X=1 taskset -c 1 python -m m --z && make test') == [
      ['python', 'a.py', '--x', '1', '--y', '2'], ['echo', 'a b'], ['python', '-m', 'm', '--z'],
      ['make', 'test']]


def test_pyproject_ranges_contain_the_lock():
  """pyproject.toml declares ranges (core and extras); requirements(-test).txt is the exact lock
  the suite runs on: every declared package is pinned there, at a version inside its range, and
  nothing is pinned exactly in pyproject (a library's user keeps their own jax)."""
  import tomllib
  from packaging.requirements import Requirement  # pylint: disable=g-import-not-at-top
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    project = tomllib.load(f)['project']
  extras = project['optional-dependencies']
  assert {'train', 'text', 'convert', 'tpu', 'test', 'all'} <= set(extras)
  lock = {Requirement(name).name.lower(): version for name, version in
          {**_pins('requirements.txt'), **_pins('requirements-test.txt')}.items()}
  declared = [Requirement(spec) for spec in project['dependencies'] + sum(extras.values(), [])]
  declared = [r for r in declared if r.name != project['name']]   # `all` names the other extras
  assert {r.name for r in declared} >= {'jax', 'flax', 'numpy', 'optax'}
  outside = [f'{r} (lock: {lock.get(r.name.lower())})' for r in declared
             if r.name.lower() not in lock or not r.specifier.contains(lock[r.name.lower()])]
  assert not outside, ('declared but not pinned in the lock, or the lock outside the range: '
                       f'{outside}')
  exact = [str(r) for r in declared if any(s.operator == '==' for s in r.specifier)]
  assert not exact, exact
  # Each floor is a tested version: the floor stack's pin (requirements-floor.txt), or the lock's
  # for a package the floor stack does not lower.
  floor = {Requirement(name).name.lower(): v for name, v in _pins('requirements-floor.txt').items()}
  untested = [f'{r} (tested: {floor.get(r.name.lower(), lock.get(r.name.lower()))})'
              for r in declared for s in r.specifier if s.operator == '>='
              and s.version != floor.get(r.name.lower(), lock.get(r.name.lower()))]
  assert not untested, f'floors that no stack tests: {untested}'
  core = {Requirement(spec).name for spec in project['dependencies']}
  assert core == {'jax', 'jaxlib', 'flax', 'numpy', 'chex', 'ml-collections'}, core


def test_api_md_lists_every_registered_mixer_and_model():
  """docs/api.md has one section per registered mixer and model, naming its class, with its
  arguments as the code has them: required ones bare, the others with their default (`=…` where
  it is no plain value), so required and optional cannot drift; the mixer table's rows are the
  ones its classes declare (`mixer_table_row`: shapes, mask and 2-D form from the traits, the
  `causal` / `rotary` columns yes exactly where the class has that option)."""
  import dataclasses
  import typing

  from poolformers_jax.registry import MIXERS, MODELS
  text = _text(os.path.join(ROOT, 'docs', 'api.md'))
  sections = {name: (cls, args) for name, cls, args in re.findall(
      r'^### `(\w+)` — `(\w+)`\n\n.*?\n\nArguments: (.*)$', text, re.M)}
  classes = {**{name: MIXERS[name] for name in MIXERS},
             **{name: typing.get_type_hints(MODELS[name])['return'] for name in MODELS}}
  assert sorted(sections) == sorted(classes)

  def documented(cls):
    items = []
    for field in dataclasses.fields(cls):
      if field.name in ('parent', 'name'):
        continue
      default = field.default
      if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
      simple = isinstance(default, (int, float, str, bool, type(None), tuple))
      if default is dataclasses.MISSING:   # required: no `=`
        items.append(f'`{field.name}`')
      else:   # a default that is no plain value (jnp.float32, an initializer) is `=…`
        items.append(f'`{field.name}={default!r}`' if simple else f'`{field.name}=…`')
    return ', '.join(items)

  for name, cls in classes.items():
    assert sections[name] == (cls.__name__, documented(cls)), name
  from poolformers_jax.layers.registry import mixer_table_row
  table = re.search(r'^\| mixer \| class \|.*\n\|[-|]+\|\n((?:\|.*\n)+)', text, re.M).group(1)
  assert table.splitlines() == [mixer_table_row(name) for name in sorted(MIXERS)]
  columns = re.findall(r'^\| `(\w+)` \| `\w+` \| .*? \| .*? \| (yes|no) \| (yes|no) \|', table,
                       re.M)
  assert {name: (causal, rotary) for name, causal, rotary in columns} == {
      name: tuple('yes' if option in {f.name for f in dataclasses.fields(cls)} else 'no'
                  for option in ('causal', 'rotary')) for name, cls in MIXERS.items()}


def readme_python(marker: str) -> str:
  """README's one python block that contains `marker`."""
  (block,) = [block for where, language, block in fenced_blocks()
              if where.startswith('README.md') and language == 'python' and marker in block]
  return block


def test_the_readme_example_runs_and_padding_does_not_reach_real_tokens():
  """README's "PoNet in your own Flax model", run as written: y is [2, 128, 64], and changing the
  padded positions of the second row changes none of its 90 real outputs."""
  import jax
  example = readme_python('PoNet(')
  scope = {}
  exec(compile(example, 'README.md', 'exec'), scope)  # pylint: disable=exec-used
  y = scope['y']
  assert y.shape == (2, 128, 64)
  x = scope['x'].at[1, 90:].set(jax.random.normal(jax.random.PRNGKey(7), (38, 64)) * 100)
  y_other_padding = scope['forward'](scope['params'], x, scope['mask'])
  assert float(abs(y_other_padding[1, :90] - y[1, :90]).max()) < 1e-5
  assert float(abs(y_other_padding[1, 90:] - y[1, 90:]).max()) > 1.0   # the change did arrive


def test_the_readme_use_a_trained_run_block_runs(tmp_path, capsys):
  """README's "Use a trained run", run as written on a tiny ListOps run trained here (its
  workdir for runs/listops_ponet): three raw inputs, one in the official parenthesised form, give
  three class ids, the argmax of the run's logits; the config line loads with its override."""
  import numpy as np

  import poolformers_jax
  from poolformers_jax.train import train_and_evaluate
  block = readme_python('load_run(')
  assert len(block.splitlines()) <= 15
  workdir = str(tmp_path / 'run')
  train_and_evaluate(poolformers_jax.config.load('configs/lra_listops.py:transformer,tiny', {
      'data.data_dir': str(tmp_path / 'data'), 'data.generator.num_train': 64,
      'data.generator.num_validation': 16, 'data.generator.num_test': 16, 'batch_size': 8,
      'eval_batch_size': 8, 'num_train_steps': 2, 'eval_every_steps': 2,
      'checkpoint_every_steps': 2, 'progress_bar': False}), workdir)
  capsys.readouterr()
  scope = {}
  exec(compile(block.replace("'runs/listops_ponet'", repr(workdir)), 'README.md', 'exec'), scope)  # pylint: disable=exec-used
  printed = capsys.readouterr().out
  assert re.fullmatch(r'\[\d \d \d\]\n', printed), printed
  run = scope['run']
  inputs = re.search(r'predict\((\[.*\])\)\)', block).group(1)
  logits = run.logits(ast.literal_eval(inputs))
  assert logits.shape == (3, 10) and printed == f'{np.argmax(logits, -1)}\n'
  assert scope['config'].model.dim == 64 and scope['config'].model.mixer == 'ponet'


# README: "The padding's values never change the real outputs; its amount changes PoNet's and
# AdaMRA's by design" (their segments are cut from the padded length).
AMOUNT_MATTERS = ('adamra', 'ponet')


def test_the_readme_padding_sentence_holds_for_every_mixer():
  """40 real tokens: padded to 64 with zeros or with noise (x100) gives the same real outputs for
  every mixer; padded to 100 instead, the same except for PoNet and AdaMRA, where it differs."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from poolformers_jax.layers import build_mixer
  from poolformers_jax.layers.registry import options_of, traits_of
  from poolformers_jax.registry import MIXERS
  real, dim = 40, 16
  x_real = np.random.default_rng(0).normal(size=(1, real, dim)).astype(np.float32)

  def padded(length, scale):
    pad = np.random.default_rng(1).normal(size=(1, length - real, dim)) * scale
    return (jnp.asarray(np.concatenate([x_real, pad.astype(np.float32)], 1)),
            jnp.arange(length)[None] < real)

  amounts, mixers = {}, {}
  for name in sorted(MIXERS):
    mixer = mixers[name] = build_mixer(name, shared=dict(num_heads=2),
                                       **({'segment_num': 4} if name == 'ponet' else {}))
    params = mixer.init(jax.random.PRNGKey(1), *padded(64, 0.0))
    out = lambda length, scale, mixer=mixer, params=params: mixer.apply(
        params, *padded(length, scale))[0, :real]
    base = out(64, 0.0)
    assert float(jnp.abs(out(64, 100.0) - base).max()) < 1e-5, name
    amounts[name] = float(jnp.abs(out(100, 0.0) - base).max())
  assert {name for name, change in amounts.items() if change > 1e-2} == set(AMOUNT_MATTERS), amounts
  # ... and these are the mixers whose traits say so, with these options.
  assert {name for name, mixer in mixers.items()
          if traits_of(mixer).why_padding_amount_matters(options_of(mixer))} == set(AMOUNT_MATTERS)
  assert all(change < 1e-5 for name, change in amounts.items() if name not in AMOUNT_MATTERS)


def test_the_readme_test_your_mixer_example_passes_and_would_catch_a_leak():
  """README's "Test your mixer", run as written: every property holds but causality (skipped,
  named); the same mixer reading padded tokens fails on the first line, naming the property."""
  import jax.numpy as jnp
  import pytest

  from poolformers_jax import registry, testing
  example = readme_python('check_mixer(')
  scope = {}
  try:
    exec(compile(example, 'README.md', 'exec'), scope)  # pylint: disable=exec-used
    assert 'mean_pool' in registry.MIXERS
  finally:   # the registry has no unregister; other tests compare docs/api.md with MIXERS
    registry.MIXERS._entries.pop('mean_pool', None)   # pylint: disable=protected-access
  report = scope['report']
  assert report.pop('causal') == 'skipped: not declared causal'
  assert set(report.values()) == {'ok'} and set(report) == set(testing.PROPERTIES) - {'causal'}

  class Leaky(scope['MeanPool']):
    def __call__(self, x, mask, **kwargs):
      return super().__call__(x, jnp.ones_like(mask), **kwargs)   # padding counted as real

  with pytest.raises(AssertionError, match=r'^padding_values: batch 1, position \d+, feature'):
    testing.check_mixer(Leaky())


def test_notebooks_are_committed_executed_with_their_plots():
  """`make notebooks` stores them executed (the suite re-runs them with nbmake): every code cell
  ran, in order, and each notebook shows at least one plot."""
  for path in sorted(glob.glob(os.path.join(ROOT, 'notebooks', '*.ipynb'))):
    with open(path, encoding='utf-8') as f:
      cells = [c for c in json.load(f)['cells'] if c['cell_type'] == 'code']
    counts = [c['execution_count'] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (RELATIVE(path), counts)
    images = [o for c in cells for o in c['outputs'] if 'image/png' in o.get('data', {})]
    assert images, f'{RELATIVE(path)} has no plot output; run make notebooks'


def test_the_api_md_examples_run_sequence_parallel():
  """docs/api.md's python blocks, run as written on the suite's 8 devices (tests/conftest.py):
  PoNet in a model of the user's own, sharded over 'fsdp' and 'sequence', equals its one-device
  output (the block asserts it), and the example really split the tokens and the parameters."""
  blocks = [block for where, language, block in fenced_blocks()
            if where.startswith('docs/api.md') and language == 'python']
  assert any('sharded_sequences(' in block for block in blocks), 'the sharding example is gone'
  for block in blocks:
    scope = {}
    exec(compile(block, 'docs/api.md', 'exec'), scope)  # pylint: disable=exec-used
    if 'y_sharded' in scope:
      assert tuple(scope['y_sharded'].sharding.spec)[:2] == ('fsdp', 'sequence')
      kernel = scope['params']['params']['PoNet_0']['query']['kernel']
      assert 'fsdp' in tuple(kernel.sharding.spec)


def test_docstring_examples_run():
  """Every `>>>` example in the package's docstrings runs and shows what it says (doctest): each
  module whose text has one is imported and its examples run."""
  import doctest
  import importlib
  import io
  modules = []
  for path in sorted(glob.glob(os.path.join(ROOT, 'poolformers_jax', '**', '*.py'),
                               recursive=True)):
    if '>>>' in _text(path):
      name = RELATIVE(path)[:-len('.py')].replace(os.sep, '.').removesuffix('.__init__')
      modules.append(name)
  assert {'poolformers_jax.layers.sequence_parallel', 'poolformers_jax.layers.registry',
          'poolformers_jax.config.files'} <= set(modules), modules
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
  report, examples = io.StringIO(), 0
  for name in modules:
    for test in doctest.DocTestFinder().find(importlib.import_module(name)):
      examples += len(test.examples)
      runner.run(test, out=report.write)
  assert examples >= 10, examples
  assert runner.failures == 0, report.getvalue()
