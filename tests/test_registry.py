"""The one registration pattern: every registering file is found by the walk, lookups fail in one
line."""
import json
import os
import subprocess
import sys

import pytest

from poolformers_jax import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_LIST_ALL = """
import importlib, json, pkgutil, sys
import poolformers_jax
from poolformers_jax import registry
kinds = {'mixer': registry.MIXERS, 'model': registry.MODELS, 'dataset': registry.DATASETS,
         'task': registry.TASKS}
listed = {kind: sorted(names) for kind, names in kinds.items()}   # the registries' walk only
for info in pkgutil.walk_packages(poolformers_jax.__path__, 'poolformers_jax.'):
  importlib.import_module(info.name)   # a program's module defines no flag, a __main__ runs nothing
print(json.dumps([listed, {kind: sorted(names) for kind, names in kinds.items()}]))
"""


def test_every_registering_file_is_found_by_the_walk():
  """Names found through the registries' walk alone == names after importing every file of
  the package."""
  out = subprocess.run([sys.executable, '-c', _LIST_ALL], capture_output=True, text=True,
                       check=True, cwd=ROOT, env={**os.environ, 'PYTHONPATH': ROOT})
  listed, everything = json.loads(out.stdout.strip().splitlines()[-1])
  assert listed == everything
  assert {'softmax', 'ponet', 'contextpool'} <= set(listed['mixer'])
  assert {'lra_encoder', 'char_lm', 'vit', 'hvt'} <= set(listed['model'])
  assert {'listops', 'lm', 'classification'} <= set(listed['dataset'] + listed['task'])


def test_unknown_and_twice_registered_names_fail_in_one_line():
  with pytest.raises(ValueError, match=r"unknown model 'vti' \(config.model.name\); choose one of "
                                       r"\[.*'vit'"):
    registry.MODELS['vti']
  assert 'vti' not in registry.MODELS and registry.MODELS.get('vti') is None
  with pytest.raises(ValueError, match="mixer 'softmax' is registered twice"):
    registry.register_mixer('softmax')(type('Other', (), {}))
  cls = registry.MIXERS['softmax']
  assert registry.register_mixer('softmax')(cls) is cls          # the same class again is fine


# Comparisons with a registered mixer's name that are no branch on the mixer, or are in a file of
# that mixer's own (its converter, its router program), with why.
NOT_A_MIXER_BRANCH = {
    ('poolformers_jax/layers/adamra.py', 'softmax'): "AdaMRA's feature_map option 'softmax'",
    ('poolformers_jax/weights/ponet.py', 'ponet'): "PoNet's own Hugging Face converter",
    ('poolformers_jax/router_load.py', 'adamra'): "AdaMRA's own router-load program",
}


def test_no_code_outside_a_mixers_own_file_branches_on_its_name():
  """`== 'name'`, `!= 'name'` and `in ('name', ...)` for every registered mixer, over the whole
  package outside the file that registers it: none but the listed non-branches."""
  import glob
  import inspect
  import re
  hits = []
  package = os.path.join(ROOT, 'poolformers_jax') + os.sep
  for name, cls in registry.MIXERS.items():
    own = os.path.abspath(inspect.getsourcefile(cls))
    assert own.startswith(package), f'{name!r} is registered from {own}, outside the package'
    pattern = re.compile(rf"""[=!]=\s*['"]{name}['"]|\bin\s*[(\[{{][^)\]}}]*['"]{name}['"]""")
    for path in glob.glob(os.path.join(ROOT, 'poolformers_jax', '**', '*.py'), recursive=True):
      relative = os.path.relpath(path, ROOT)
      if os.path.abspath(path) == own or (relative, name) in NOT_A_MIXER_BRANCH:
        continue
      with open(path, encoding='utf-8') as f:
        hits += [f'{relative}:{number}: {line.strip()}' for number, line in enumerate(f, 1)
                 if pattern.search(line)]
  assert hits == []
  assert {'softmax', 'linear', 'ponet', 'adamra', 'contextpool', 'sac', 'msac'} <= set(
      registry.MIXERS)
  # The pattern does find a branch (the kind this refactor removed from models/ponet_mlm.py).
  assert re.search(r"""[=!]=\s*['"]ponet['"]""", "if self.mixer == 'ponet' else {}")
  assert re.search(r"""\bin\s*[(\[{][^)\]}]*['"]ponet['"]""", "if m in ('softmax', 'ponet'):")
