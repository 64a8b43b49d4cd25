"""Keep freed host memory in the process, so that XLA:CPU steps stop paying page faults.

XLA:CPU takes every step's buffers from malloc; glibc hands large blocks out as fresh `mmap`
pages, unmaps them on free and trims its arenas, so each step touches its whole working set as
new pages, in page faults. With the heap kept (no mmap for large blocks, no trimming, one arena)
a step reuses the last one's pages (docs/efficiency.md, "Host memory"). The cost: the process
keeps its peak heap, and every thread allocates from one arena. POOLFORMERS_SYSTEM_MALLOC=1
keeps glibc's defaults (other C libraries and systems are left alone anyway).
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys

# mallopt parameters of glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_SETTINGS = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_ARENA_MAX, 1))
OPT_OUT = 'POOLFORMERS_SYSTEM_MALLOC'

_applied = False


def _glibc():
  if not sys.platform.startswith('linux'):
    return None
  try:
    libc = ctypes.CDLL(None)
  except OSError:
    return None
  # glibc only: mallopt elsewhere takes other parameters
  return libc if hasattr(libc, 'gnu_get_libc_version') else None


def keep_freed_memory() -> bool:
  """Applies the settings once per process (call it before the first XLA computation and before
  data threads start: the arena limit binds threads that allocate afterwards). True when set."""
  global _applied
  if _applied:
    return True
  if os.environ.get(OPT_OUT, '') not in ('', '0'):
    return False
  libc = _glibc()
  if libc is None:
    return False
  _applied = all(libc.mallopt(param, value) == 1 for param, value in _SETTINGS)
  if not _applied:
    logging.warning('mallopt refused the host-memory settings; XLA:CPU steps may spend time '
                    'in page faults.')
  return _applied
