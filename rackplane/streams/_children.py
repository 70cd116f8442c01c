"""Child processes that die with their parent (the broker and workers `rackplane up` starts).

They run in their own session (so a terminal's Ctrl-C reaches the parent, which stops them in
order), which also means nothing stops them when the parent is killed outright. On Linux the
kernel can: `PR_SET_PDEATHSIG` sends the child SIGTERM when its parent dies. Seen before this
existed: workers of killed test scripts spinning at 13% CPU each against a broker long gone.
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for `subprocess.Popen`: SIGTERM this child when the parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
