# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One server across hosts: the head's rendezvous, and a headless node's link to its head.

Over plain TCP, as the real thing's ranks meet at the master (or data-parallel RPC) address: a headless node connects
and says which rank it is (``JOIN <rank>``), then holds the connection open for as long as it runs. The head serves
its API only once every other rank has joined, and answers /health and every request with 503 from the moment one of
them is gone (its connection closed). A headless node that loses its head keeps its workers and their GPUs and keeps
trying to join again, as vLLM's do (vllm-project/vllm#32136).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional

from vllm._proctree import log

RETRY_S = 0.5


class Rendezvous:
    """The head's side: listens on (address, port) and tracks which of ``peers`` are joined now and which ever were."""

    def __init__(self, address: str, port: int, peers: Iterable[int]) -> None:
        self.peers = frozenset(peers)
        self._joined: Dict[int, socket.socket] = {}
        self._ever: set = set()
        self._changed = threading.Condition()
        self._sock = socket.create_server((address, port), reuse_port=False)
        threading.Thread(target=self._accept, name="rendezvous", daemon=True).start()

    def complete(self) -> bool:
        """Every peer joined and still connected."""
        with self._changed:
            return self.peers <= set(self._joined)

    def lost(self) -> List[int]:
        """The peers that joined once and are gone now."""
        with self._changed:
            return sorted(self._ever - set(self._joined))

    def wait_complete(self, timeout: Optional[float] = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not self.peers <= set(self._joined):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def close(self) -> None:
        self._sock.close()
        with self._changed:
            for conn in self._joined.values():
                conn.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError:  # closed: the server is going down
                return
            threading.Thread(target=self._member, args=(conn, peer), daemon=True).start()

    def _member(self, conn: socket.socket, peer: object) -> None:
        rank = _read_join(conn)
        if rank is None or rank not in self.peers:
            log(f"rendezvous: refused {peer}: not one of the ranks {sorted(self.peers)} (said {rank})", level="WARNING")
            conn.close()
            return
        with self._changed:
            self._joined[rank] = conn
            self._ever.add(rank)
            self._changed.notify_all()
            waiting = sorted(self.peers - set(self._joined))
        log(f"rendezvous: rank {rank} joined from {peer}" + (f"; waiting for {waiting}" if waiting else "; every rank joined"))
        while conn.recv(64):  # a member only holds the connection: its end is the rank's end
            pass
        with self._changed:
            if self._joined.get(rank) is conn:
                del self._joined[rank]
            self._changed.notify_all()
        log(f"rendezvous: rank {rank} is gone: the server cannot serve", level="ERROR")


def _read_join(conn: socket.socket) -> Optional[int]:
    conn.settimeout(10)
    line = b""
    try:
        while not line.endswith(b"\n") and len(line) < 64:
            chunk = conn.recv(64)
            if not chunk:
                return None
            line += chunk
    except OSError:
        return None
    conn.settimeout(None)
    words = line.split()
    if len(words) != 2 or words[0] != b"JOIN" or not words[1].isdigit():
        return None
    return int(words[1])


def join_head(address: str, port: int, rank: int, ready: Callable[[], bool], stopping: threading.Event) -> threading.Thread:
    """A headless node's link: once ``ready`` (its workers hold their GPUs), join the head at (address, port) as
    ``rank``, hold the connection, and join again whenever it breaks, until ``stopping`` is set; the workers are never
    touched."""

    def link() -> None:
        while not ready():
            if stopping.wait(0.1):
                return
        said_waiting = False
        while not stopping.is_set():
            try:
                with socket.create_connection((address, port), timeout=2) as conn:
                    conn.sendall(b"JOIN %d\n" % rank)
                    conn.settimeout(None)
                    log(f"headless rank {rank}: joined the head at {address}:{port}")
                    said_waiting = False
                    while conn.recv(64):
                        pass
                log(f"headless rank {rank}: lost the head at {address}:{port}; keeping the workers, joining again",
                    level="WARNING")
            except OSError as error:
                if not said_waiting:
                    log(f"headless rank {rank}: waiting for the head at {address}:{port} ({error})")
                    said_waiting = True
            stopping.wait(RETRY_S)

    thread = threading.Thread(target=link, name="headless-link", daemon=True)
    thread.start()
    return thread
