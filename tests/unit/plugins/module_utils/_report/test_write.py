# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's writer (_report/write): options checked before anything is written, check mode, idempotence."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._report import render
from ansible_collections.gpuops.fleet.plugins.module_utils._report.write import ReportError, run_report


def test_writer_checks_options_before_writing(tmp_path):
    base = {"dest": str(tmp_path / "out"), "hosts": ["a"], "results": [None], "title": "t"}
    with pytest.raises(ReportError, match=r"^idle_threshold_mib: -5"):
        run_report(dict(base, idle_threshold_mib=-5), False)
    # the deprecated name, as a caller without the module's alias handling passes it
    with pytest.raises(ReportError, match=r"^idle_threshold_mib: -6"):
        run_report(dict(base, threshold_mib=-6), False)
    with pytest.raises(ReportError, match=r"results: 2 result\(s\) for 1 host"):
        run_report(dict(base, results=[None, None], idle_threshold_mib=1024), False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReportError, match="dest: .* is not a directory"):
        run_report(dict(base, dest=str(tmp_path / "file"), idle_threshold_mib=1024), False)
    assert not (tmp_path / "out").exists()
    checked = run_report(dict(base, idle_threshold_mib=1024), True)
    assert checked["changed"] and not (tmp_path / "out").exists()
    done = run_report(dict(base, idle_threshold_mib=1024), False, now=0)
    assert done["changed"] and sorted(os.listdir(tmp_path / "out")) == sorted(render.FILES)
    again = run_report(dict(base, idle_threshold_mib=1024), False, now=0)
    assert not again["changed"]
