# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readings a test judges a server by, taken from the machine and never from what the code under test wrote:
which process listens on a port (the kernel's socket table, through psutil), and its HTTP answers."""

from __future__ import annotations

import typing as t
import urllib.error
import urllib.request

import psutil

__all__ = ["listening_pid", "health"]


def listening_pid(port: int) -> t.Optional[int]:
    """The PID of the process that listens on TCP `port` (loopback or any address), None when nothing does.

    A server whose children inherited the listening socket shows up once per process that holds it: the one
    whose parent does not hold it too is the server itself.
    """
    holders = {conn.pid for conn in psutil.net_connections(kind="tcp")
               if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid}
    tops = []
    for pid in holders:
        try:
            parent = psutil.Process(pid).ppid()
        except psutil.NoSuchProcess:
            continue
        if parent not in holders:
            tops.append(pid)
    if len(tops) > 1:
        raise AssertionError("port %d: %d unrelated processes listen on it: %s" % (port, len(tops), sorted(tops)))
    return tops[0] if tops else None


def health(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> int:
    """GET /health: the status, -1 when nothing answers."""
    try:
        with urllib.request.urlopen("http://%s:%d/health" % (host, port), timeout=timeout) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return -1
