"""mkdocs hooks of the documentation site (mkdocs.yml): the repository as it is, made a site.

- Pages from outside docs/: README.md is the landing page (index.md), the notebooks and their
  README are notebooks/, CHANGELOG.md is changelog.md.
- Links: every page keeps the relative links it has in the repository (read on GitHub or in an
  editor); each is resolved from the file's own place and pointed at the target's place in the
  site, anchors kept. A link to a repository file that is no page (a module, a test, LICENSE)
  goes to a page of that file's text under source/ (left out of the search). A link to nothing
  stays as written, and the strict build fails on it.
- Coverage: the build fails, naming them, when a public name of the package (`public_names`)
  has no entry in the API reference (the inventory mkdocstrings writes, objects.inv).
"""
from __future__ import annotations

import glob
import importlib
import inspect
import os
import posixpath
import re
import sys
import types
import zlib

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = 'source'   # the folder of the pages of linked repository files

# Modules whose every public name is documented: a package's public names are those it exports
# (`__all__` where it has one, else every name that is not private and not a module); a module's
# are those it defines (its functions, classes and constants, not what it imports).
PUBLIC_MODULES = ('poolformers_jax.layers', 'poolformers_jax.models', 'poolformers_jax.registry',
                  'poolformers_jax.testing', 'poolformers_jax.run', 'poolformers_jax.config',
                  'poolformers_jax.data')
# Single public names of modules that are otherwise programs or internals.
PUBLIC_NAMES = ('poolformers_jax.load_run', 'poolformers_jax.Run', 'poolformers_jax.config',
                'poolformers_jax.train.train_and_evaluate', 'poolformers_jax.eval.evaluate',
                'poolformers_jax.eval.evaluate_state',
                'poolformers_jax.trainer.sharding.make_mesh',
                'poolformers_jax.trainer.sharding.state_shardings',
                'poolformers_jax.trainer.sharding.FsdpRules',
                'poolformers_jax.trainer.sharding.collective_ops',
                'poolformers_jax.trainer.sharding.Collective')

LINK = re.compile(r'(!?\[[^\]]*\]\()([^)\s]+)(\))')
FENCE = re.compile(r'^(```|~~~).*?^\1', re.S | re.M)
LANGUAGES = {'.py': 'python', '.sh': 'bash', '.json': 'json', '.toml': 'toml', '.cff': 'yaml',
             '.txt': 'text', '': 'text'}

# site path -> repository path of every page, filled by on_files.
_origin: dict[str, str] = {}
# repository path -> site path of every file the site holds.
_site: dict[str, str] = {}


def _outside_pages() -> dict[str, str]:
  """repository path -> site path of the pages that live outside docs/."""
  pages = {'README.md': 'index.md', 'CHANGELOG.md': 'changelog.md',
           'notebooks/README.md': posixpath.join('notebooks', 'index.md')}
  for path in sorted(glob.glob(os.path.join(ROOT, 'notebooks', '*.ipynb'))):
    name = os.path.relpath(path, ROOT)
    pages[name] = name
  return pages


def _links(markdown: str):
  """(match, target) of every relative link outside fenced code."""
  fenced = [m.span() for m in FENCE.finditer(markdown)]
  for match in LINK.finditer(markdown):
    target = match.group(2)
    if (re.match(r'[a-z][a-z0-9+.\-]*:', target) or target.startswith(('#', '/'))
        or any(start <= match.start() < end for start, end in fenced)):
      continue
    yield match, target


def _resolve(origin: str, target: str) -> str:
  """The repository path a link of the file `origin` points at (without its #anchor)."""
  return posixpath.normpath(posixpath.join(posixpath.dirname(origin), target.partition('#')[0]))


def _source_page(path: str) -> str:
  """A page showing a repository file's text, out of the search."""
  with open(os.path.join(ROOT, path), encoding='utf-8') as f:
    text = f.read()
  fence = '`' * max(3, 1 + max((len(run) for run in re.findall(r'`+', text)), default=0))
  language = LANGUAGES.get(os.path.splitext(path)[1], 'text')
  return (f'---\nsearch:\n  exclude: true\n---\n\n# {path}\n\n{fence}{language}\n{text}'
          f'{"" if text.endswith(chr(10)) else chr(10)}{fence}\n')


def _folder_page(path: str, site: str) -> str:
  """A page listing a repository folder's files, each linked where the site shows it."""
  lines = [f'---\nsearch:\n  exclude: true\n---\n\n# {path}/\n']
  for name in sorted(os.listdir(os.path.join(ROOT, path))):
    target = _site.get(posixpath.join(path, name))
    if name.startswith('.') or name == '__pycache__':
      continue
    lines.append(f'- [`{name}`]({posixpath.relpath(target, posixpath.dirname(site))})' if target
                 else f'- `{name}`')
  return '\n'.join(lines) + '\n'


@event_priority(100)   # before mkdocs-jupyter's, which turns the notebooks into pages
def on_files(files, config):
  _origin.clear()
  _site.clear()
  for file in files:
    _site[posixpath.join('docs', file.src_uri)] = file.src_uri
    if file.src_uri.endswith('.md'):
      _origin[file.src_uri] = posixpath.join('docs', file.src_uri)
  for path, site in _outside_pages().items():
    if path == site:   # a notebook: read from its place (mkdocs-jupyter reads it by src_dir)
      files.append(File(path, src_dir=ROOT, dest_dir=config.site_dir,
                        use_directory_urls=config.use_directory_urls))
    else:
      files.append(File.generated(config, site, abs_src_path=os.path.join(ROOT, path)))
    _site[path] = site
    if site.endswith('.md'):
      _origin[site] = path
  linked = set()
  for origin in list(_origin.values()):
    with open(os.path.join(ROOT, origin), encoding='utf-8') as f:
      for _, target in _links(f.read()):
        path = _resolve(origin, target)
        if path not in _site and os.path.exists(os.path.join(ROOT, path)):
          linked.add(path)
  folders = sorted(p for p in linked if os.path.isdir(os.path.join(ROOT, p)))
  for path in sorted(linked - set(folders)):
    try:   # a text file: a page of its text
      site = posixpath.join(SOURCE, path + '.md')
      files.append(File.generated(config, site, content=_source_page(path)))
    except UnicodeDecodeError:   # an image or other binary file: copied as it is
      site = posixpath.join(SOURCE, path)
      files.append(File.generated(config, site, abs_src_path=os.path.join(ROOT, path)))
    _site[path] = site
  for path in folders:   # a folder: a page listing its files
    site = posixpath.join(SOURCE, path, 'index.md')
    files.append(File.generated(config, site, content=_folder_page(path, site)))
    _site[path] = site
  return files


def on_page_markdown(markdown, page, config, files):
  origin = _origin.get(page.file.src_uri)
  if origin is None:   # a source/ page
    return markdown
  here = posixpath.dirname(page.file.src_uri)

  def rewrite(match):
    target = match.group(2)
    site = _site.get(_resolve(origin, target))
    if site is None:
      return match.group(0)   # mkdocs reports it (strict: the build fails)
    anchor = target.partition('#')[2]
    new = posixpath.relpath(site, here or '.') + (f'#{anchor}' if anchor else '')
    return match.group(1) + new + match.group(3)

  out, last = [], 0
  for match, _ in _links(markdown):
    out += [markdown[last:match.start()], rewrite(match)]
    last = match.end()
  return ''.join(out) + markdown[last:]


# ------------------------------------------------------------------------- the coverage check

def _defined_here(module: types.ModuleType, name: str) -> bool:
  value = getattr(module, name)
  if isinstance(value, types.ModuleType):
    return False
  owner = (getattr(value, '__module__', None) if (inspect.isclass(value) or callable(value))
           else None)
  if owner is not None:
    return owner == module.__name__
  # A constant: public where the module's own text assigns it.
  source = inspect.getsource(module)
  return re.search(rf'^{re.escape(name)}\b[^=\n]*=', source, re.M) is not None


def public_names() -> dict[str, tuple[str, ...]]:
  """Every public name of the package -> the paths under which its API entry may be filed (the
  name as exported, or where it is defined)."""
  if ROOT not in sys.path:   # this checkout's package, as mkdocstrings reads it (paths: [.])
    sys.path.insert(0, ROOT)
  import poolformers_jax  # pylint: disable=g-import-not-at-top
  from poolformers_jax.registry import MIXERS, MODELS  # pylint: disable=g-import-not-at-top
  del poolformers_jax
  names: dict[str, tuple[str, ...]] = {}

  def add(path, value):
    canonical = (f'{value.__module__}.{value.__qualname__}'
                 if inspect.isclass(value) or inspect.isfunction(value) else path)
    names[path] = (path, canonical)

  for module_name in PUBLIC_MODULES:
    module = importlib.import_module(module_name)
    is_package = hasattr(module, '__path__')
    exported = getattr(module, '__all__', None)
    if exported is None:
      exported = [n for n in vars(module) if not n.startswith('_')
                  and not isinstance(getattr(module, n), types.ModuleType)
                  and (is_package or _defined_here(module, n))]
    for name in exported:
      add(f'{module_name}.{name}', getattr(module, name))
  for path in PUBLIC_NAMES:
    module_name, _, name = path.rpartition('.')
    add(path, getattr(importlib.import_module(module_name), name))
  import typing  # pylint: disable=g-import-not-at-top
  for kind, registry in (('mixer', MIXERS), ('model', MODELS)):
    for key in sorted(registry):
      value = registry[key]
      cls = value if inspect.isclass(value) else typing.get_type_hints(value)['return']
      names[f'{kind} {key!r}: {cls.__module__}.{cls.__qualname__}'] = (
          f'{cls.__module__}.{cls.__qualname__}',)
  return names


def documented(site_dir: str) -> set[str]:
  """The Python names mkdocstrings rendered (its objects.inv)."""
  with open(os.path.join(site_dir, 'objects.inv'), 'rb') as f:
    for _ in range(4):   # the four header lines
      f.readline()
    lines = zlib.decompress(f.read()).decode('utf-8').splitlines()
  return {line.split(' ', 1)[0] for line in lines if ' py:' in line}


@event_priority(-100)   # after mkdocstrings has written objects.inv
def on_post_build(config):
  have = documented(config.site_dir)
  missing = [name for name, paths in public_names().items() if not have.intersection(paths)]
  if missing:
    raise PluginError(
        f'{len(missing)} public names have no entry in the API reference (docs/reference/): '
        + ', '.join(missing) + '. Add each to its page there (a `::: path` line, or the '
        "package's __all__ where the page renders the package), or make it private.")
