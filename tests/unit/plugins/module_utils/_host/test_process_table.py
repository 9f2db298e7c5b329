# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The process table (_host/process_table): the PIDs never to signal, on a fake process table."""

from __future__ import annotations

import types

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import process_table as _process_table
from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import protected_pids
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakeClock, FakePsutil, host_rows, ME


@pytest.fixture(autouse=True)
def this_pid(monkeypatch):
    """protected_pids() asks os.getpid(); in the fake table this module is ME."""
    monkeypatch.setattr(_process_table, "os", types.SimpleNamespace(getpid=lambda: ME))


def fake():
    return FakePsutil(host_rows(), FakeClock())


def test_protected_pids_are_0_1_this_module_and_its_ancestors():
    assert protected_pids(fake()) == {0, 1, 50, 51, ME}
