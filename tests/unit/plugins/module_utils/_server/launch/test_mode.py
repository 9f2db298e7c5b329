# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mode.resolve_mode and mode.backend: auto is systemd where /run/systemd/system is a directory."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import container, mode, process, systemd


def test_auto_follows_the_systemd_directory(tmp_path):
    assert mode.resolve_mode("auto", str(tmp_path)) == "systemd"
    assert mode.resolve_mode(None, str(tmp_path)) == "systemd"
    assert mode.resolve_mode("auto", str(tmp_path / "missing")) == "process"
    (tmp_path / "file").write_text("")
    assert mode.resolve_mode("auto", str(tmp_path / "file")) == "process"


def test_a_named_mode_is_kept_and_its_backend_has_the_same_functions():
    assert mode.resolve_mode("process", "/") == "process" and mode.resolve_mode("systemd", "/nonexistent") == "systemd"
    assert mode.backend("process") is process and mode.backend("systemd") is systemd
    for name in ("status", "stop", "launch"):
        assert callable(getattr(process, name)) and callable(getattr(systemd, name))
    with pytest.raises(ValueError):
        mode.resolve_mode("kubernetes")


def test_the_container_mode_is_named_never_auto(tmp_path):
    assert mode.resolve_mode("container", str(tmp_path)) == "container" and mode.backend("container") is container
    assert mode.resolve_mode("auto", str(tmp_path / "missing")) == "process"
    for name in ("status", "stop", "launch"):
        assert callable(getattr(container, name))
