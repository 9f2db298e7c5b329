# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures shared by the module_utils unit tests."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.tests.support.child_processes import started_children


@pytest.fixture
def child():
    """Start a real process of this test: child(*argv, **popen_kwargs) -> its Popen (ended and reaped by that handle,
    even on failure)."""
    with started_children() as start:
        yield start
