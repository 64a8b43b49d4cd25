"""Process-wide jax settings the programs opt into; importing poolformers_jax changes none of them.

    from poolformers_jax import runtime
    runtime.configure_program()   # what the programs and benchmarks/* run first

Both settings touch jax through private names that no public API offers; each checks that the
name exists, and when it does not (another jax), logs a warning and leaves jax as it is.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os

import jax

_log = logging.getLogger(__name__)

# form -> jax's name of the CPU lowering rule of the threefry hash (jax/_src/random/threefry2x32.py)
THREEFRY_RULES = {'unrolled': '_threefry2x32_lowering_rule',   # GPU / TPU's: one fusable expression
                  'rolled': '_threefry2x32_cpu_lowering_rule'}  # jax's CPU default: a 5-step loop


def use_cpu_when_no_tpu_chip() -> bool:
  """Sets jax_platforms='cpu' when libtpu is installed (to compile for TPU slices: `summary
  --topology`) but no TPU chip is attached, where jax would start the TPU runtime and warn; True if
  set. Nothing is set when the user chose platforms, a GPU plugin is installed or jax started."""
  chosen = jax.config.jax_platforms  # type: ignore[attr-defined]  # jax's Config types no flags
  if os.environ.get('JAX_PLATFORMS') or chosen or importlib.util.find_spec('libtpu') is None:
    return False
  if (importlib.metadata.entry_points(group='jax_plugins')
      or importlib.util.find_spec('jax_plugins') is not None):   # a GPU plugin: leave jax alone
    return False
  try:   # no public API counts TPU chips without starting the TPU runtime
    from jax._src import hardware_utils, xla_bridge  # pylint: disable=g-import-not-at-top
    chips = hardware_utils.num_available_tpu_chips_and_device_id()[0]
    started = xla_bridge.backends_are_initialized()
  except (ImportError, AttributeError) as error:
    _log.warning('jax %s: %s; jax picks the platform itself (set JAX_PLATFORMS=cpu to skip '
                 "libtpu's start-up)", jax.__version__, error)
    return False
  if chips or started:
    return False
  jax.config.update('jax_platforms', 'cpu')
  return True


def install_cpu_threefry_lowering(form: str = 'unrolled') -> bool:
  """Lowers jax's threefry hash for the CPU in `form` ('unrolled' or 'rolled'); True if installed.

  Dropout masks are threefry bits. For the CPU, jax lowers the hash's 20 rounds as a loop of 5
  passes over whole arrays, unfused with the mask's select (docs/results/ponet_speed.md);
  unrolled (as for GPU and TPU) it is one expression that fuses into its consumer. Every random
  bit is unchanged (tested). Applies to every program compiled afterwards in this process."""
  rule_name = THREEFRY_RULES[form]
  try:   # private API: no public one chooses a primitive's lowering
    from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
    try:
      threefry2x32 = importlib.import_module('jax._src.random.threefry2x32')
    except ImportError:   # jax 0.8 kept it in prng
      threefry2x32 = importlib.import_module('jax._src.prng')
    rule = getattr(threefry2x32, rule_name)
    register = mlir.register_lowering
    primitive = threefry2x32.threefry2x32_p
  except (ImportError, AttributeError) as error:
    _log.warning('jax %s: %s; the CPU keeps jax\'s own threefry lowering (the same bits; '
                 'dropout-heavy CPU steps run slower)', jax.__version__, error)
    return False
  register(primitive, rule, platform='cpu')
  return True


def configure_program() -> None:
  """The programs' settings: the CPU when libtpu has no chip, the unrolled threefry lowering on
  the CPU. Call before anything is compiled."""
  use_cpu_when_no_tpu_chip()
  install_cpu_threefry_lowering('unrolled')
