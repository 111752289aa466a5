"""The draw pool's worker process (``draw_pool.DrawPool``): receives a function and its
design spaces once, then replays requests with its own replay cache and sends back each
candidate's plain data. A module of its own so that running it does not re-import the
package's copy of ``draw_pool`` under another name.
"""

from __future__ import annotations

import pickle
import sys
from multiprocessing.connection import Connection
from typing import Any

from .draw_pool import draw_one


def worker_main(conn: Connection) -> None:
    from ..space import ReplayCache

    func, spaces, postprocs = pickle.loads(conn.recv_bytes())
    cache = ReplayCache()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        try:
            reply: Any = [draw_one(func, spaces, postprocs, r, cache) for r in msg]
        except Exception as e:  # noqa: BLE001 - sent to the caller, which raises it
            reply = f"{type(e).__name__}: {e}"
        conn.send(reply)


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])))
