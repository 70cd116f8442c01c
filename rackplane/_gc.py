"""`cycle_collection_paused()`: for phases that build millions of acyclic objects.

CPython's cyclic garbage collector runs after every ~700 net allocations and, now and then,
walks every tracked object of the heap. A replay (events decoded from the history, then
folded) builds millions of small objects that refcounting frees (pydantic events, tuples,
state records: none form cycles), so those walks find nothing and cost time that grows with
the heap: decoding 250,000 events went from 48,000 to 85,000 per CPU-second without them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Pause the cyclic collector inside the block (nested use is fine); cycles made inside
    wait for the next collection after it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
