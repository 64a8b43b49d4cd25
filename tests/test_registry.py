"""The one registration pattern: every registering file is in MODULES, lookups fail in one line."""
import importlib
import pkgutil

import pytest

import poolformers_jax
from poolformers_jax import registry

KINDS = {'mixer': registry.MIXERS, 'model': registry.MODELS, 'dataset': registry.DATASETS,
         'task': registry.TASKS}


def _defined_in(value):
  """The module a registered def / class comes from (specs and tasks: their first function)."""
  if hasattr(value, '__qualname__'):
    return value.__module__
  return next(f.__module__ for f in vars(value).values() if callable(f))


def test_every_registering_file_is_listed_in_modules():
  for info in pkgutil.walk_packages(poolformers_jax.__path__, 'poolformers_jax.'):
    if info.name != 'poolformers_jax.summary':   # a program: defines flags at import
      importlib.import_module(info.name)
  for kind, names in KINDS.items():
    assert len(names) >= 3, kind
    for name in names:
      assert _defined_in(names[name]) in registry.MODULES[kind], (kind, name)


def test_unknown_and_twice_registered_names_fail_in_one_line():
  with pytest.raises(ValueError, match=r"unknown model 'vti' \(config.model.name\); choose one of "
                                       r"\[.*'vit'"):
    registry.MODELS['vti']
  assert 'vti' not in registry.MODELS and registry.MODELS.get('vti') is None
  with pytest.raises(ValueError, match="mixer 'softmax' is registered twice"):
    registry.register_mixer('softmax')(type('Other', (), {}))
  cls = registry.MIXERS['softmax']
  assert registry.register_mixer('softmax')(cls) is cls          # the same class again is fine
