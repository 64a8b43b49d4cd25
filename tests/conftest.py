"""Test setup: 8 fake CPU devices (before jax is imported), parsed absl flags for grain workers."""
import os

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
# XLA:CPU programs compiled at LLVM's -O0: the same HLO program (fusion, layouts, buffers, so
# the memory figures tests compare), a third less compile time, the time most tests spend. XLA
# asks no fast-math of LLVM, so the arithmetic is IEEE's at either level. TPU compiles ignore it.
for _flag in ('--xla_backend_optimization_level=0', '--xla_llvm_disable_expensive_passes=true'):
  if _flag.split('=')[0] not in os.environ['XLA_FLAGS']:
    os.environ['XLA_FLAGS'] += ' ' + _flag
os.environ.setdefault('MPLBACKEND', 'Agg')

from absl import flags  # noqa: E402

from poolformers_jax import runtime  # noqa: E402
from poolformers_jax.trainer import host_memory  # noqa: E402

flags.FLAGS.mark_as_parsed()
host_memory.keep_freed_memory()   # as train.py does: XLA:CPU steps without page-fault storms
# libtpu is installed to compile for TPU slices; without a chip, the CPU (as train.py chooses),
# in this process and in the programs and notebook kernels the tests start.
if runtime.use_cpu_when_no_tpu_chip():
  os.environ['JAX_PLATFORMS'] = 'cpu'
# The in-process tests keep jax's own CPU threefry lowering (the loop): their hundreds of tiny
# steps compile ~25 % faster than with the unrolled form that train.py installs
# (runtime.configure_program); the bits are the same (tests/train/test_step.py).
