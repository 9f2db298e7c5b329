# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""write_atomic: the whole file or the old one, with the mode asked for, and no temporary file left behind;
write_if_changed: only a file that does not hold the content already, nothing in check mode."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils import _io


def test_text_and_bytes_replace_the_file_whole_with_the_mode(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    _io.write_atomic(str(path), "new ✓", mode=0o600)
    assert path.read_text(encoding="utf-8") == "new ✓" and stat.S_IMODE(path.stat().st_mode) == 0o600
    _io.write_atomic(str(path), b"\x00bytes")
    assert path.read_bytes() == b"\x00bytes" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["report.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "summary.md"
    path.write_text("old")

    def refuse(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(_io.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        _io.write_atomic(str(path), "new")
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["summary.md"]


def test_write_if_changed_writes_only_what_differs_and_nothing_in_check_mode(tmp_path):
    path = tmp_path / "run" / "summary.md"
    assert _io.write_if_changed(str(path), "new ✓", check_mode=True) is True
    assert not (tmp_path / "run").exists()
    assert _io.write_if_changed(str(path), "new ✓") is True
    assert path.read_text(encoding="utf-8") == "new ✓" and stat.S_IMODE(path.stat().st_mode) == 0o644
    before = path.stat().st_ino
    assert _io.write_if_changed(str(path), "new ✓".encode("utf-8")) is False
    assert _io.write_if_changed(str(path), "new ✓", check_mode=True) is False
    assert path.stat().st_ino == before, "an unchanged file is not rewritten"
    assert _io.write_if_changed(str(path), b"\x00bytes") is True
    assert path.read_bytes() == b"\x00bytes" and sorted(os.listdir(path.parent)) == ["summary.md"]
