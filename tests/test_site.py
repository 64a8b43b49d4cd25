"""The documentation site, built as `make docs` builds it and read in a real browser.

`mkdocs build --strict` (mkdocs.yml: any warning, a broken link or anchor, a page outside the nav,
a public name without an API entry, fails it) into a temporary folder, served over HTTP on
127.0.0.1; headless Chromium (Debian's `chromium`, driven through the DevTools protocol on a pipe)
opens it and checks what a reader sees: the landing page with its navigation, `check_mixer`'s
signature on its API page, a notebook's figures loaded, the page's own search finding `PoNet`;
then every local link and image of every page is fetched from the server: none answers 404, and
every #anchor is an id of its page. Without chromium the test is skipped, except in CI
(`CI=true`), where .ci/run installs it.

`SITE_SCREENSHOTS=<folder>` also saves the landing page, an API page and a notebook page there.
"""
import base64
import functools
import glob
import html.parser
import http.server
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM_FLAGS = ('--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                  '--disable-background-networking', '--disable-component-update',
                  '--disable-sync', '--hide-scrollbars', '--remote-debugging-pipe')
TIMEOUT = 60.0   # seconds for one page to load or one answer of the browser


def chromium() -> str | None:
  return next(filter(None, map(shutil.which, ('chromium', 'chromium-browser'))), None)


class Browser:
  """Headless Chromium driven through the DevTools protocol on a pipe (`--remote-debugging-pipe`:
  JSON messages ending in a NUL byte, commands on the browser's fd 3, answers on its fd 4), on
  one page."""

  def __init__(self, binary: str, profile: str):
    to_browser, self._commands = os.pipe()
    self._answers, from_browser = os.pipe()
    command = ' '.join([binary, *CHROMIUM_FLAGS, f'--user-data-dir={profile}', 'about:blank'])
    # The shell gives the browser the two pipe ends as fds 3 and 4.
    self._process = subprocess.Popen(
        ['bash', '-c', f'exec {command} 3<&{to_browser} 4>&{from_browser}'],
        pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_browser)
    os.close(from_browser)
    self._buffer, self._next_id, self.events = b'', 0, []
    target = self._send('Target.createTarget', url='about:blank')['targetId']
    self._session = self._send('Target.attachToTarget', targetId=target, flatten=True)['sessionId']
    self.send('Page.enable')
    self.send('Emulation.setDeviceMetricsOverride', width=1280, height=900, deviceScaleFactor=1,
              mobile=False)

  def _read(self, deadline: float) -> dict:
    while b'\0' not in self._buffer:
      ready, _, _ = select.select([self._answers], [], [], max(0.0, deadline - time.time()))
      chunk = os.read(self._answers, 1 << 20) if ready else b''
      if not chunk:
        raise TimeoutError('chromium did not answer (or exited)')
      self._buffer += chunk
    message, _, self._buffer = self._buffer.partition(b'\0')
    return json.loads(message)

  def _send(self, method: str, session: str | None = None, **params) -> dict:
    self._next_id += 1
    message = {'id': self._next_id, 'method': method, 'params': params}
    if session:
      message['sessionId'] = session
    os.write(self._commands, json.dumps(message).encode() + b'\0')
    deadline = time.time() + TIMEOUT
    while True:
      answer = self._read(deadline)
      if answer.get('id') == self._next_id:
        if 'error' in answer:
          raise RuntimeError(f'{method}: {answer["error"]}')
        return answer['result']
      self.events.append(answer)

  def send(self, method: str, **params) -> dict:
    return self._send(method, self._session, **params)

  def open(self, url: str) -> None:
    self.events.clear()
    self.send('Page.navigate', url=url)
    deadline = time.time() + TIMEOUT
    while not any(e.get('method') == 'Page.loadEventFired' for e in self.events):
      self.events.append(self._read(deadline))

  def js(self, expression: str):
    """The value of a JavaScript expression in the page (awaited if a promise)."""
    result = self.send('Runtime.evaluate', expression=expression, awaitPromise=True,
                       returnByValue=True)
    if 'exceptionDetails' in result:
      raise RuntimeError(f'{expression}: {result["exceptionDetails"]}')
    return result['result'].get('value')

  def wait_for(self, expression: str, what: str):
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
      value = self.js(expression)
      if value:
        return value
      time.sleep(0.2)
    raise AssertionError(f'{what}: not seen within {TIMEOUT:.0f} s')

  def screenshot(self, path: str) -> None:
    data = self.send('Page.captureScreenshot', format='png')['data']
    with open(path, 'wb') as f:
      f.write(base64.b64decode(data))

  def close(self) -> None:
    try:
      self._send('Browser.close')
    except (TimeoutError, RuntimeError, OSError):
      pass
    try:
      self._process.wait(timeout=10)
    except subprocess.TimeoutExpired:
      self._process.kill()
      self._process.wait()
    os.close(self._commands)
    os.close(self._answers)


class _Quiet(http.server.SimpleHTTPRequestHandler):
  def log_message(self, *args):
    pass


@pytest.fixture(scope='module')
def site(tmp_path_factory):
  """The site built strictly, served on 127.0.0.1: its base URL and folder."""
  folder = str(tmp_path_factory.mktemp('site'))
  proc = subprocess.run(
      [sys.executable, '-m', 'mkdocs', 'build', '--strict', '--site-dir', folder],
      cwd=ROOT, capture_output=True, text=True, timeout=900,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu', 'NO_MKDOCS_2_WARNING': '1'})
  assert proc.returncode == 0, f'mkdocs build --strict failed:\n{proc.stderr[-4000:]}'
  server = http.server.ThreadingHTTPServer(
      ('127.0.0.1', 0), functools.partial(_Quiet, directory=folder))
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  yield f'http://127.0.0.1:{server.server_address[1]}/', folder
  server.shutdown()
  server.server_close()


@pytest.fixture(scope='module')
def browser(tmp_path_factory):
  binary = chromium()
  if binary is None:
    if os.environ.get('CI'):
      pytest.fail('chromium is not installed; .ci/run installs it (apt-get install chromium)')
    pytest.skip('chromium is not installed (Debian: apt-get install chromium)')
  page = Browser(binary, str(tmp_path_factory.mktemp('chromium-profile')))
  yield page
  page.close()


def _screenshot(browser, name):
  folder = os.environ.get('SITE_SCREENSHOTS')
  if folder:
    os.makedirs(folder, exist_ok=True)
    time.sleep(1)   # the header's title settles after a scroll
    browser.screenshot(os.path.join(folder, f'site_{name}.png'))


def test_the_site_as_a_reader_sees_it(site, browser):
  base, folder = site
  # The landing page: the README, with the site's navigation.
  browser.open(base)
  assert browser.js('document.querySelector(".md-content h1").firstChild.textContent.trim()') == (
      'poolformers_jax')
  nav = browser.js('[...document.querySelectorAll("nav.md-nav--primary .md-nav__link")]'
                   '.map(a => a.textContent.trim())')
  assert {'Install', 'API reference', 'Papers', 'Notebooks', 'Results'} <= set(nav), nav
  assert browser.js('document.querySelector("a[href$=\'install/\']") !== null')
  _screenshot(browser, 'landing')

  # An API page: check_mixer's entry with its signature, types and defaults.
  browser.open(base + 'reference/testing/')
  signature = browser.js(
      'document.getElementById("poolformers_jax.testing.check_mixer")'
      '.closest(".doc-object").querySelector(".doc-signature").textContent')
  flat = ' '.join(signature.split())
  for part in ('check_mixer(', 'mixer: Module', 'causal: bool | None = None', 'atol: float',
               ') -> dict'):
    assert part in flat, (part, flat)
  browser.js('document.getElementById("poolformers_jax.testing.check_mixer").scrollIntoView();'
             'window.scrollBy(0, -80)')
  _screenshot(browser, 'api')

  # A notebook page: its figures, stored in the notebook, are loaded.
  browser.open(base + 'notebooks/02_ponet/')
  images = browser.wait_for(
      '(() => { const images = [...document.querySelectorAll(".md-content img")];'
      ' return images.length && images.every(i => i.complete) &&'
      ' images.map(i => i.naturalWidth); })()', 'the notebook figures')
  assert images and min(images) > 0, images
  browser.js('document.querySelector(".md-content img").scrollIntoView(); window.scrollBy(0, -300)')
  _screenshot(browser, 'notebook')

  # The search: typed into the page's search box, answered by its own index.
  browser.open(base)
  browser.js('document.querySelector("label.md-search__icon, .md-header__button[for=__search]")'
             '.click()')
  browser.js('document.querySelector("input.md-search__input").focus()')
  browser.send('Input.insertText', text='PoNet')
  results = browser.wait_for(
      '[...document.querySelectorAll(".md-search-result__item a")].map(a => a.href)',
      'search results for PoNet')
  assert any(url.startswith(base + 'papers/ponet/') for url in results), results

  # Every local link and image of every page (one test: the site is built once).
  _check_links(base, folder)


class _Links(html.parser.HTMLParser):
  def __init__(self):
    super().__init__()
    self.links, self.ids = [], set()

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    if 'id' in attrs:
      self.ids.add(attrs['id'])
    for name in ('href', 'src'):
      if attrs.get(name) and not (tag == 'link' and attrs.get('rel') == 'canonical'):
        self.links.append(attrs[name])


def _check_links(base, folder):
  """Every href / src of every page of the site, fetched: none answers 404, and a #anchor is an
  id of its page."""
  pages = {}
  for path in glob.glob(os.path.join(folder, '**', '*.html'), recursive=True):
    parser = _Links()
    with open(path, encoding='utf-8') as f:
      parser.feed(f.read())
    url = base + os.path.relpath(path, folder).replace(os.sep, '/').removesuffix('index.html')
    pages[url] = parser
  assert len(pages) > 50
  broken, anchors, checked = [], [], {}
  for page, parser in sorted(pages.items()):
    for link in parser.links:
      target = urllib.parse.urljoin(page, link)
      if not target.startswith(base) or link.startswith('data:'):
        continue
      address, _, anchor = target.partition('#')
      if address not in checked:
        try:
          with urllib.request.urlopen(urllib.request.Request(address, method='HEAD'),
                                      timeout=10) as answer:
            checked[address] = answer.status
        except urllib.error.HTTPError as error:
          checked[address] = error.code
      if checked[address] == 404:
        broken.append(f'{page}: {link}')
      elif anchor and address in pages and urllib.parse.unquote(anchor) not in pages[address].ids:
        anchors.append(f'{page}: {link}')
  assert len(checked) > 100
  assert not broken, 'local links answering 404:\n' + '\n'.join(broken[:50])
  assert not anchors, 'links to an anchor the page does not have:\n' + '\n'.join(anchors[:50])


def _hooks():
  pytest.importorskip('mkdocs')
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location('docs_hooks',
                                                os.path.join(ROOT, 'docs', 'hooks.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_the_coverage_check_names_a_public_name_without_an_entry(tmp_path, monkeypatch):
  """The build's coverage check (docs/hooks.py) passes on an inventory holding every public name,
  and fails, naming it, when the package gains a public function the inventory lacks."""
  import types  # pylint: disable=g-import-not-at-top
  import zlib  # pylint: disable=g-import-not-at-top

  from mkdocs.exceptions import PluginError  # pylint: disable=g-import-not-at-top

  import poolformers_jax.testing  # pylint: disable=g-import-not-at-top
  hooks = _hooks()
  names = hooks.public_names()
  assert {'poolformers_jax.testing.check_mixer', 'poolformers_jax.layers.PoNet',
          'poolformers_jax.layers.sharded_sequences', 'poolformers_jax.load_run',
          'poolformers_jax.train.train_and_evaluate', 'poolformers_jax.config.load',
          'poolformers_jax.data.make_train_iterator'} <= set(names)
  assert any(name.startswith("model 'vit'") for name in names)
  lines = ''.join(f'{paths[0]} py:function 1 x.html -\n' for paths in names.values())
  with open(tmp_path / 'objects.inv', 'wb') as f:
    f.write(b'# Sphinx inventory version 2\n# Project: p\n# Version: 0\n# zlib\n')
    f.write(zlib.compress(lines.encode()))
  config = types.SimpleNamespace(site_dir=str(tmp_path))
  hooks.on_post_build(config)

  def assert_new_property(mixer):
    del mixer
  assert_new_property.__module__ = 'poolformers_jax.testing'
  monkeypatch.setattr(poolformers_jax.testing, 'assert_new_property', assert_new_property,
                      raising=False)
  with pytest.raises(PluginError, match=r'^1 public names .*: '
                     r'poolformers_jax\.testing\.assert_new_property\. Add'):
    hooks.on_post_build(config)
