# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Children of a fake vLLM process and vLLM's shutdown: SIGTERM, a grace, then SIGKILL the tree.

The Supervisor sleeps on a self-pipe that signal.set_wakeup_fd fills: SIGTERM/SIGINT and a child's
SIGCHLD wake it at once, as real vLLM's signal handlers do, instead of a poll that hides races.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Callable, List, Optional, TextIO, Tuple

from vllm import _simhost

from gpusim import procfs

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def start_child(module: str, args: List[str]) -> "subprocess.Popen[bytes]":
    """Start `python -m <module> <args>` (it rewrites its own title, as vLLM's spawned processes do)."""
    return subprocess.Popen(  # pylint: disable=consider-using-with  # reaped by Supervisor
        [sys.executable, "-m", module] + args, env=_simhost.child_env(), stdin=subprocess.DEVNULL
    )


class Supervisor:
    """Watches this process's children until a stop signal, a child's death or a deadline, then ends the tree.

    Create it before starting children, so a SIGTERM that comes during start-up is handled too.
    """

    def __init__(self, name: str, children: Optional[List["subprocess.Popen[bytes]"]] = None) -> None:
        self.name = name
        self.children: List["subprocess.Popen[bytes]"] = list(children or [])
        self.stop_signal: Optional[int] = None
        self._on_stop: List[Callable[[], None]] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        signal.signal(signal.SIGCHLD, self._on_child)  # a Python handler, so SIGCHLD also writes the pipe

    def _on_signal(self, signum: int, _frame: Optional[FrameType]) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum

    def _on_child(self, _signum: int, _frame: Optional[FrameType]) -> None:
        """Nothing to do here: the byte in the wake-up pipe makes run() look at the children."""

    def adopt(self, children: List["subprocess.Popen[bytes]"]) -> None:
        self.children.extend(children)

    def on_stop(self, action: Callable[[], None]) -> None:
        """Run `action` first thing when the tree goes down (the API server cuts its HTTP streams)."""
        self._on_stop.append(action)

    def run(self, fail_at: Optional[float] = None, on_fail: Optional[Callable[[], None]] = None) -> int:
        """0 after a requested shutdown; 1 when a child died on its own or `fail_at` (monotonic) came."""
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
            timeout: Optional[float] = None  # no poll: only a signal or the deadline wakes us
            if fail_at is not None:
                timeout = fail_at - time.monotonic()
                if timeout <= 0:
                    if on_fail is not None:
                        on_fail()
                    self.shutdown()
                    return 1
            self._sleep(timeout)

    def _sleep(self, timeout: Optional[float]) -> None:
        """Until a signal arrives (its number lands in the wake-up pipe) or `timeout` seconds pass."""
        try:
            readable = select.select([self._wake_r], [], [], timeout)[0]
        except InterruptedError:  # pragma: no cover  (Python retries select itself, PEP 475)
            return
        if not readable:
            return
        while True:
            try:
                data = os.read(self._wake_r, 512)
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return
                raise
            if not data:
                return
            for signum in data:  # the handler may not have run yet: read the signal from the pipe too
                if signum in STOP_SIGNALS and self.stop_signal is None:
                    self.stop_signal = signum

    def shutdown(self) -> None:
        for action in self._on_stop:
            action()
        grace = _simhost.shutdown_grace_s()
        tree = _snapshot_tree()
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + grace
        while any(child.poll() is None for child in self.children):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._sleep(remaining)  # each child's exit wakes us (SIGCHLD)
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


def log(message: str, level: str = "INFO", stream: Optional[TextIO] = None) -> None:
    print(f"{level} {time.strftime('%m-%d %H:%M:%S')} {message}", file=stream or sys.stdout, flush=True)
