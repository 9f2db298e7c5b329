# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A server run as a detached process: start it in its own session, stop its tree (launch/process.py uses both;
launch/systemd.py reads a unit's tree with snapshot() and alive()).

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import START_TIME_TOLERANCE_S

Clock = t.Callable[[], float]
Sleep = t.Callable[[float], None]


class LaunchError(Exception):
    """The server could not be started at all (no such program, no permission, bad directory)."""


LOG_MODE = 0o600  # the server may print what it was given (a token in a traceback): only its owner reads the log


def open_log(log_file: str) -> t.BinaryIO:
    """``log_file`` for appending, created mode 0600 (never readable by others, not even for an instant); an older log
    that others could read is made 0600 too."""
    descriptor = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), LOG_MODE)
    try:
        if os.fstat(descriptor).st_mode & 0o077:
            os.fchmod(descriptor, LOG_MODE)
        return os.fdopen(descriptor, "ab")
    except BaseException:
        os.close(descriptor)
        raise


def launch_detached(argv: t.Sequence[str], env: t.Mapping[str, str], log_file: str, cwd: t.Optional[str],
                    shown_argv: t.Optional[t.Sequence[str]] = None) -> int:
    """Start ``argv`` (no shell) in a new session and process group, stdin from /dev/null, output appended to
    ``log_file`` (mode 0600); return its PID. The log's launch line shows ``shown_argv`` (the argv with its secrets
    masked) when given. The caller does not wait for it: it outlives the task by design."""
    folder = os.path.dirname(log_file)
    if folder:
        os.makedirs(folder, exist_ok=True)
    shown = list(argv if shown_argv is None else shown_argv)
    try:
        with open_log(log_file) as log:
            log.write(("==== %s launching: %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), " ".join(shown))).encode("utf-8", "replace"))
            log.flush()
            proc = subprocess.Popen(  # pylint: disable=consider-using-with  # a daemon: nobody waits for it
                list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True,
            )
    except OSError as exc:
        raise LaunchError("cannot start %s: %s" % (argv[0], exc.strerror or exc)) from None
    # forget the child without a ResourceWarning: a detached server is reaped by init, not by this task
    proc.returncode = 0
    return proc.pid


class Stopped(t.NamedTuple):
    pid: int
    name: t.Optional[str]
    signal: t.Optional[str]  # the last signal sent before it exited; None if it exited on its own
    seconds: float


Member = t.Tuple[t.Any, float, t.Optional[str]]  # a process, its start time and its name, as snapshot() found it


def snapshot(psutil: t.Any, proc: t.Any) -> t.List[Member]:
    """``proc`` and its descendants, with their start times and names (so a later signal or check hits only them);
    a process that ends while it is read is left out."""
    members = [proc]
    try:
        members += proc.children(recursive=True)
    except psutil.Error:
        pass
    result = []
    for member in members:
        try:
            result.append((member, member.create_time(), member.name()))
        except psutil.Error:
            continue
    return result


def alive(psutil: t.Any, proc: t.Any, create_time: float) -> bool:
    """Whether ``proc`` still runs with the start time ``create_time`` (a zombie does not)."""
    try:
        return abs(proc.create_time() - create_time) <= START_TIME_TOLERANCE_S and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _send(psutil: t.Any, proc: t.Any, create_time: float, signum: int) -> bool:
    if not alive(psutil, proc, create_time):
        return False
    try:
        proc.send_signal(signum)
    except psutil.Error:
        return False
    return True


def stop_tree(psutil: t.Any, proc: t.Any, stop_timeout: float, clock: Clock = time.monotonic,
              sleep: Sleep = time.sleep) -> t.List[Stopped]:
    """SIGTERM the server (vLLM then ends its own engine and workers), wait up to ``stop_timeout``,
    then SIGKILL whatever is left of the tree as it was before the stop. Returns each process that ended."""
    members = snapshot(psutil, proc)
    start = clock()
    last_signal: t.Dict[int, str] = {}
    ended: t.Dict[int, Stopped] = {}

    def collect() -> bool:
        for member, created, name in members:
            if member.pid not in ended and not alive(psutil, member, created):
                ended[member.pid] = Stopped(member.pid, name, last_signal.get(member.pid), round(clock() - start, 3))
        return len(ended) == len(members)

    server, server_created, _name = members[0] if members else (proc, 0.0, None)
    if members and _send(psutil, server, server_created, signal.SIGTERM):
        last_signal[server.pid] = "SIGTERM"
    deadline = start + stop_timeout
    while not collect() and clock() < deadline:
        sleep(0.05)
    if not collect():
        for member, created, _name in members:
            if member.pid not in ended and _send(psutil, member, created, signal.SIGKILL):
                last_signal[member.pid] = "SIGKILL"
        kill_deadline = clock() + 5.0
        while not collect() and clock() < kill_deadline:
            sleep(0.05)
    return sorted(ended.values(), key=lambda stopped: stopped.pid)
