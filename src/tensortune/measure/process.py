"""Worker processes that serve requests over a socket: the runner's (timing kernels) and
the draw pool's (replaying traces). Each is a plain interpreter running a module, so,
unlike multiprocessing's spawn, it never re-imports the caller's ``__main__`` and scripts
need no ``__main__`` guard.

Example:
    >>> proc, conn = spawn("tensortune.measure.worker")
    >>> conn.send(msg); reply = conn.recv()
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any


def spawn(module: str) -> tuple[subprocess.Popen, Connection]:
    """Start ``python -m module FD``; the module serves the returned connection."""
    parent, child = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", module, str(child.fileno())],
                            pass_fds=(child.fileno(),))
    child.close()
    return proc, Connection(parent.detach())


def serve(conn: Connection, handle: Callable[[Any], Any],
          on_error: Callable[[Exception], Any]) -> None:
    """Answer each message with ``handle(msg)``, or ``on_error(e)`` when it raises, until
    the caller sends None or hangs up. Ctrl-C, which a terminal sends to the caller and
    its workers alike, is the caller's to handle: a worker ignores it and is stopped by
    the caller (or by its hanging up) instead of printing a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        try:
            reply = handle(msg)
        except Exception as e:  # noqa: BLE001 - sent to the caller as a value
            reply = on_error(e)
        conn.send(reply)
