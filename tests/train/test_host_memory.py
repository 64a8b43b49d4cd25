"""host_memory.keep_freed_memory: a freed large block is reused without page faults, and
POOLFORMERS_SYSTEM_MALLOC=1 leaves glibc as it is. Each case runs in a fresh interpreter (the
allocator settings hold for the whole process)."""
import json
import os
import subprocess
import sys

import pytest

from poolformers_jax.trainer import host_memory

pytestmark = pytest.mark.skipif(host_memory._glibc() is None,
                                reason='mallopt settings exist for glibc on Linux only')

_CHILD = r'''
import ctypes, json
from poolformers_jax.trainer import host_memory
applied = host_memory.keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def minor_faults():
  return int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[7])

faults = []
for _ in range(3):      # 64 MiB malloc'ed, written, freed: as an XLA step's buffers
  before = minor_faults()
  block = libc.malloc(64 << 20)
  ctypes.memset(block, 1, 64 << 20)
  libc.free(block)
  faults.append(minor_faults() - before)
print(json.dumps(dict(applied=applied, faults=faults)))
'''


def _run_child(opt_out: str) -> dict:
  env = dict(os.environ, POOLFORMERS_SYSTEM_MALLOC=opt_out)
  out = subprocess.run([sys.executable, '-c', _CHILD], env=env, capture_output=True, text=True,
                       check=True, timeout=120).stdout
  return json.loads(out.strip().splitlines()[-1])


def test_freed_blocks_are_reused_without_page_faults():
  kept = _run_child('')
  assert kept['applied'] is True
  pages = (64 << 20) // os.sysconf('SC_PAGE_SIZE')
  assert kept['faults'][0] >= pages // 2           # the first touch maps the pages
  assert max(kept['faults'][1:]) < pages // 20     # later rounds reuse them


def test_opt_out_keeps_glibc_defaults():
  default = _run_child('1')
  assert default['applied'] is False
  pages = (64 << 20) // os.sysconf('SC_PAGE_SIZE')
  # glibc maps a block this large afresh on every allocation: every round faults again.
  assert min(default['faults']) >= pages // 2
