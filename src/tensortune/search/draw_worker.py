"""The draw pool's worker process (``draw_pool.DrawPool``): receives a function and its
design spaces once, then replays requests with its own replay cache and sends back each
candidate's plain data. A module of its own so that running it does not re-import the
package's copy of ``draw_pool`` under another name.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
from multiprocessing.connection import Connection
from typing import Any

from .draw_pool import draw_one, emit_one

# The cyclic collector's thresholds in a worker. Drawing allocates IR nodes by the
# million; with the defaults (700, 10, 10) the collector's passes over them took about a
# quarter of a worker's CPU (whole 64-trial logs of BMM and C2D replayed in fresh
# processes with it on and off), and these thresholds took 10-13% off (RESULTS.md). The
# nodes are immutable and seldom in cycles, so collecting less often frees the same
# memory later.
GC_THRESHOLDS = (20_000, 50, 100)


def worker_main(conn: Connection) -> None:
    from ..measure.process import serve
    from ..space import ReplayCache

    gc.set_threshold(*GC_THRESHOLDS)
    func, spaces, postprocs = pickle.loads(conn.recv_bytes())
    cache = ReplayCache()

    def handle(msg: Any) -> list[Any]:
        if isinstance(msg, dict):   # the C of the candidates chosen for measurement
            return [emit_one(func, spaces, postprocs, t, msg["target"], cache)
                    for t in msg["emit"]]
        return [draw_one(func, spaces, postprocs, r, cache) for r in msg]

    # An exception other than an illegal decision goes back as text; the caller raises it.
    serve(conn, handle, lambda e: f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])))
    # Leave without the interpreter's teardown, which frees the replay cache's IR nodes
    # one by one while the caller waits: closing a 256-trial CONVLAYER run's draw pools
    # took 1.1-1.6 s (five runs), 0.1 s without it (RESULTS.md). Nothing is left to
    # write but the standard streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
