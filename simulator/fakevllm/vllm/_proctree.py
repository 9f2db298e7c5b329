# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Children of a fake vLLM process and vLLM's shutdown: SIGTERM, a grace, then SIGKILL the tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import List, Optional, Tuple

from vllm import _simhost

from gpusim import procfs

POLL_S = 0.05


def start_child(module: str, args: List[str]) -> "subprocess.Popen[bytes]":
    """Start `python -m <module> <args>` (it rewrites its own title, as vLLM's spawned processes do)."""
    return subprocess.Popen(  # pylint: disable=consider-using-with  # reaped by Supervisor
        [sys.executable, "-m", module] + args, env=_simhost.child_env(), stdin=subprocess.DEVNULL
    )


class Supervisor:
    """Watches this process's children until a stop signal or a child's death, then ends the tree."""

    def __init__(self, name: str, children: List["subprocess.Popen[bytes]"]) -> None:
        self.name = name
        self.children = children
        self.stop_signal: Optional[int] = None
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: Optional[FrameType]) -> None:
        self.stop_signal = signum

    def run(self) -> int:
        """0 after a requested shutdown, 1 when a child died on its own (vLLM then fails too)."""
        while True:
            if self.stop_signal is not None:
                log(f"{self.name}: received {signal.Signals(self.stop_signal).name}, shutting down")
                self.shutdown()
                return 0
            dead = [child for child in self.children if child.poll() is not None]
            if dead:
                log(f"{self.name}: child process {dead[0].pid} died unexpectedly (exit code {dead[0].returncode}),"
                    " shutting down")
                self.shutdown()
                return 1
            time.sleep(POLL_S)

    def shutdown(self) -> None:
        grace = _simhost.shutdown_grace_s()
        tree = _snapshot_tree()
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(child.poll() is None for child in self.children):
            time.sleep(POLL_S / 5)
        survivors = [(pid, start) for pid, start in tree if procfs.is_running(pid, start)]
        if survivors:
            log(f"{self.name}: {len(survivors)} process(es) still alive after {grace:g} s, sending SIGKILL")
        for pid, start in survivors:
            if procfs.is_running(pid, start):
                signal_quietly(pid, signal.SIGKILL)
        for child in self.children:
            child.wait()


def _snapshot_tree() -> List[Tuple[int, int]]:
    """(pid, starttime) of every descendant of this process, so a later SIGKILL hits only them."""
    stats = [procfs.read_stat(pid) for pid in procfs.descendants(os.getpid())]
    return [(stat.pid, stat.starttime) for stat in stats if stat is not None]


def signal_quietly(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def log(message: str) -> None:
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} {message}", flush=True)
