# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real processes a test starts, each ended and reaped by its own Popen handle when the test ends, even on failure.

Standard library only: the unit tests (under ansible-test, as
ansible_collections.gpuops.fleet.tests.support.child_processes) and the simulator's tests (on their pythonpath) share it.
"""

from __future__ import annotations

import contextlib
import subprocess
import typing as t

__all__ = ["StartChild", "started_children"]

StartChild = t.Callable[..., "subprocess.Popen[t.Any]"]


@contextlib.contextmanager
def started_children() -> t.Iterator[StartChild]:
    """Gives ``start(*argv, **popen_kwargs)``, which starts ``argv`` (no shell) and returns its Popen; on leaving, each
    child that still runs is killed, and every one is reaped."""
    started: t.List["subprocess.Popen[t.Any]"] = []

    def start(*argv: t.Any, **popen_kwargs: t.Any) -> "subprocess.Popen[t.Any]":
        proc = subprocess.Popen(list(argv), **popen_kwargs)  # pylint: disable=consider-using-with  # reaped on leaving
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
