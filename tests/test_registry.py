"""The one registration pattern: every registering file is in MODULES, lookups fail in one line."""
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
listed = {kind: sorted(names) for kind, names in kinds.items()}   # imports MODULES only
for info in pkgutil.walk_packages(poolformers_jax.__path__, 'poolformers_jax.'):
  importlib.import_module(info.name)   # a program's module defines no flag, a __main__ runs nothing
print(json.dumps([listed, {kind: sorted(names) for kind, names in kinds.items()}]))
"""


def test_every_registering_file_is_listed_in_modules():
  """Names found through MODULES alone == names after importing every file of the package."""
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
