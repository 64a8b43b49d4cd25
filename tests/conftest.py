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

from poolformers_jax.train import host_memory  # noqa: E402

flags.FLAGS.mark_as_parsed()
host_memory.keep_freed_memory()   # as train.py does: XLA:CPU steps without page-fault storms


# The tests compile hundreds of tiny training steps, where the unrolled threefry hash that the
# step module installs for speed at real sizes costs ~25 % more compile time than it saves. The
# bits are the same (tests/train/test_step.py proves it with the unrolled form installed, and
# every train.py the tests start runs the unrolled form).
from poolformers_jax.train import step  # noqa: E402  (importing it installs the unrolled form)

step.rolled_threefry_on_cpu()
