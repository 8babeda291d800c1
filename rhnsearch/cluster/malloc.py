"""glibc's malloc arenas capped in a sweep's driver.

glibc gives a thread that allocates while others do an arena of its own (up to 8 a core), and
each arena keeps much of what was freed in it: the driver's many threads (Ray's, Tune's, the
MLflow sender's) made its memory grow with the trials; with 2 it grows less
(docs/scale-history.md).
"""

import ctypes
import os

MALLOC_ARENAS = 2
M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)


def limit_malloc_arenas() -> bool:
    """Cap this process's glibc malloc arenas at MALLOC_ARENAS, unless $MALLOC_ARENA_MAX
    sets them. Whether it did (not where the C library is not glibc)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return mallopt(M_ARENA_MAX, MALLOC_ARENAS) == 1
