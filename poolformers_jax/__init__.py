"""poolformers_jax: pooling and multi-resolution attention in JAX/Flax."""
import importlib.metadata
import importlib.util
import os

__version__ = '0.1.0'


def _cpu_when_libtpu_has_no_chip() -> None:
  """On a machine without TPU chips, libtpu is installed only to compile for TPU slices
  (`summary --topology`). Left alone, jax starts the TPU runtime at every start there, which
  looks for TPU hosts and prints warnings before a program's first line. With no TPU chip
  attached and no GPU plugin installed, the CPU is the only backend there is: say so to jax
  (as JAX_PLATFORMS=cpu would), unless the user chose platforms or jax has already started."""
  if os.environ.get('JAX_PLATFORMS') or importlib.util.find_spec('libtpu') is None:
    return
  if (importlib.metadata.entry_points(group='jax_plugins')
      or importlib.util.find_spec('jax_plugins') is not None):   # a GPU plugin: leave jax alone
    return
  from jax._src import hardware_utils, xla_bridge   # no public API says either
  if hardware_utils.num_available_tpu_chips_and_device_id()[0] or xla_bridge.backends_are_initialized():
    return
  import jax
  jax.config.update('jax_platforms', 'cpu')


_cpu_when_libtpu_has_no_chip()


def __getattr__(name: str):
  """Lazy exports: `import poolformers_jax` stays light (no jax) until one is used."""
  if name in ('load_run', 'Run'):
    from poolformers_jax import run
    return getattr(run, name)
  if name == 'config':   # poolformers_jax.config.load / complete
    return importlib.import_module('poolformers_jax.config')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
