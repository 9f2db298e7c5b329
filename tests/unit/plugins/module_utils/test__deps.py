# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Optional imports are made on first use, and a missing one is reported with its package and traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from ansible_collections.gpuops.fleet.plugins.module_utils._deps import Dependency


def test_nothing_is_imported_until_the_module_is_asked_for():
    calls = []

    def importer():
        calls.append(1)
        return "the module"

    dep = Dependency("thing", "thing-pkg", "to do things", importer)
    assert calls == []
    assert dep.found and dep.module == "the module" and dep.traceback is None
    assert calls == [1]  # imported once, however often it is read


def test_a_missing_import_is_not_found_and_keeps_its_traceback():
    def importer():
        raise ImportError("No module named 'thing'")

    dep = Dependency("thing", "thing-pkg", "to do things", importer)
    assert not dep.found and dep.module is None
    assert "No module named 'thing'" in dep.traceback
    assert "thing-pkg" in dep.message() and "to do things" in dep.message()


def test_a_value_put_in_place_counts_as_the_import():
    dep = Dependency("thing", "thing-pkg", "to do things", lambda: "real")
    dep.module = None
    assert not dep.found


def test_the_lock_and_process_modules_load_neither_nvml_nor_the_url_helpers():
    # a module run is a fresh interpreter on the host: what it imports is CPU paid on every run
    probe = (
        "import sys\n"
        "import ansible_collections.gpuops.fleet.plugins.modules.vllm_lock\n"
        "import ansible_collections.gpuops.fleet.plugins.modules.vllm_process\n"
        "print(sorted(m for m in ('pynvml', 'ansible.module_utils.urls') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
