# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures shared by the module_utils unit tests."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture
def child():
    """Start a real process of this test (ended and reaped by its own Popen handle, even on failure)."""
    started = []

    def start(*argv):
        proc = subprocess.Popen(list(argv))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
