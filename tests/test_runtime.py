"""Importing poolformers_jax changes nothing in jax; the programs' settings are explicit opt-ins
(poolformers_jax/runtime.py) that log one line where the private jax name they need is gone."""
import importlib.util
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from poolformers_jax import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In a fresh process as a user starts one (no JAX_PLATFORMS; libtpu is installed for the tests):
# jax's config and CPU threefry lowering before and after importing every module of the package,
# then after the opt-ins, which must change exactly what they say.
_IMPORT_ALL = textwrap.dedent('''
  import importlib, json, pkgutil
  import jax
  from jax._src.interpreters import mlir
  from jax._src.random import threefry2x32

  def snapshot():
    lowering = mlir._platform_specific_lowerings['cpu'].get(threefry2x32.threefry2x32_p)
    return {'config': {k: repr(v) for k, v in jax.config.values.items()},
            'threefry_cpu': getattr(lowering, 'rule', None)}

  before = snapshot()
  import poolformers_jax
  failed = {}
  for module in pkgutil.walk_packages(poolformers_jax.__path__, 'poolformers_jax.'):
    try:
      importlib.import_module(module.name)
    except ImportError as error:
      failed[module.name] = str(error)
  after = snapshot()
  from poolformers_jax import runtime
  runtime.configure_program()
  opted = snapshot()
  print(json.dumps({
      'modules': len(list(pkgutil.walk_packages(poolformers_jax.__path__, 'poolformers_jax.'))),
      'failed': failed,
      'config_changed': sorted(k for k in before['config']
                               if before['config'][k] != after['config'].get(k)),
      'threefry_changed': before['threefry_cpu'] is not after['threefry_cpu'],
      'opted_config_changed': sorted(k for k in after['config']
                                     if after['config'][k] != opted['config'][k]),
      'opted_threefry_unrolled': opted['threefry_cpu'] is threefry2x32._threefry2x32_lowering_rule,
      'backend_started': __import__('jax._src.xla_bridge').
          _src.xla_bridge.backends_are_initialized()}))
''')


@pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                    reason='needs libtpu (requirements-test.txt)')
def test_importing_every_module_leaves_jax_config_and_lowerings_unchanged():
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  result = subprocess.run([sys.executable, '-c', _IMPORT_ALL], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr
  out = __import__('json').loads(result.stdout.splitlines()[-1])
  assert out['modules'] > 60 and out['failed'] == {}   # torch / TensorFlow users import them lazily
  assert out['config_changed'] == [] and not out['threefry_changed']
  assert not out['backend_started']   # importing started no backend either
  # The opt-ins do what they say, and nothing else (no TPU chip on the test machines).
  assert out['opted_config_changed'] == ['jax_platforms'] and out['opted_threefry_unrolled']


def test_opt_ins_log_one_line_and_change_nothing_when_jax_lacks_the_private_name(
    monkeypatch, caplog):
  from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
  from jax._src.random import threefry2x32  # pylint: disable=g-import-not-at-top
  lowerings = mlir._platform_specific_lowerings['cpu']  # pylint: disable=protected-access
  before = lowerings.get(threefry2x32.threefry2x32_p)
  monkeypatch.delattr(threefry2x32, '_threefry2x32_lowering_rule')
  with caplog.at_level(logging.WARNING, logger='poolformers_jax.runtime'):
    assert not runtime.install_cpu_threefry_lowering('unrolled')
  assert lowerings.get(threefry2x32.threefry2x32_p) is before
  assert len(caplog.records) == 1 and '_threefry2x32_lowering_rule' in caplog.text
  assert 'same bits' in caplog.text


@pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                    reason='needs libtpu (requirements-test.txt)')
def test_cpu_choice_logs_one_line_when_jax_cannot_count_chips():
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  code = ('import logging; logging.basicConfig(format="%(message)s")\n'
          'from jax._src import hardware_utils\n'
          'del hardware_utils.num_available_tpu_chips_and_device_id   # as a jax that moved it\n'
          'import jax; from poolformers_jax import runtime\n'
          'print(runtime.use_cpu_when_no_tpu_chip(), jax.config.jax_platforms)')
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
  assert result.returncode == 0, result.stderr
  assert result.stdout.split() == ['False', 'None']
  assert result.stderr.count('\n') == 1 and 'num_available_tpu_chips_and_device_id' in result.stderr
