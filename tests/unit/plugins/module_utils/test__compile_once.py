# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_compile_once: a module of this collection imported from a zip (as from an AnsiballZ payload) is compiled once, and
gets the same module attributes as from zipimport alone; anything else is left to the import system.

The zip tests run in a fresh interpreter (the names they import are this collection's, already imported here), with
the real _compile_once.py in the zip, imported first, as vllm_process imports it on the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from importlib.machinery import PathFinder

from ansible_collections.gpuops.fleet.plugins.module_utils import _compile_once

UTILS = "ansible_collections/gpuops/fleet/plugins/module_utils/"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "plugins", "module_utils",
                      "_compile_once.py")

# run in the child: import a package, a module in it (which imports a flat module) and a flat module from the zip,
# counting zipimport's compiles of each file, then print each module's attributes
CHILD = r'''
import json, sys, zipimport
sys.path.insert(0, sys.argv[1])
compiled = []
real = zipimport._compile_source
def counting(pathname, source):
    compiled.append(pathname.split(".zip/")[-1])
    return real(pathname, source)
zipimport._compile_source = counting
if sys.argv[2] == "once":
    from ansible_collections.gpuops.fleet.plugins.module_utils import _compile_once
    del compiled[:]
from ansible_collections.gpuops.fleet.plugins.module_utils._pkg import mod
from ansible_collections.gpuops.fleet.plugins.module_utils import _flat, _pkg
try:
    from ansible_collections.gpuops.fleet.plugins.module_utils._pkg import missing
    missing_error = None
except ImportError as exc:
    missing_error = type(exc).__name__
seen = {}
for module in (_pkg, mod, _flat):
    seen[module.__name__.rpartition(".")[2]] = {
        "file": module.__file__, "path": getattr(module, "__path__", None), "origin": module.__spec__.origin,
        "cached": module.__cached__, "loader": type(module.__loader__).__name__, "package": module.__package__,
        "parent": module.__spec__.parent}
print(json.dumps({"compiled": compiled, "seen": seen, "answer": mod.ANSWER, "missing": missing_error,
                  "finders": sum(1 for finder in sys.meta_path if getattr(finder, "__name__", "") == "Finder")}))
'''


def _zip(tmp_path):
    path = tmp_path / "payload.zip"
    with open(SOURCE, encoding="utf-8") as handle:
        once = handle.read()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for folder in ("ansible_collections", "ansible_collections/gpuops", "ansible_collections/gpuops/fleet",
                       "ansible_collections/gpuops/fleet/plugins", UTILS.rstrip("/"), UTILS + "_pkg"):
            out.writestr(folder + "/__init__.py", "")
        out.writestr(UTILS + "_compile_once.py", once)
        out.writestr(UTILS + "_flat.py", "VALUE = 20\n")
        out.writestr(UTILS + "_pkg/mod.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._flat import VALUE\n"
                                            "ANSWER = VALUE + 22\n")
    return path


def _import(tmp_path, how):
    done = subprocess.run([sys.executable, "-c", CHILD, str(_zip(tmp_path)), how], capture_output=True, text=True,
                          check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return json.loads(done.stdout)


def test_a_module_in_a_zip_is_compiled_once_with_the_attributes_zipimport_gives(tmp_path):
    plain, once = _import(tmp_path, "plain"), _import(tmp_path, "once")
    assert once["answer"] == plain["answer"] == 42
    assert once["seen"] == plain["seen"]
    assert once["seen"]["_pkg"]["path"] == [str(tmp_path / "payload.zip" / UTILS / "_pkg")]
    assert once["seen"]["mod"]["file"] == str(tmp_path / "payload.zip" / UTILS / "_pkg" / "mod.py")
    assert once["seen"]["mod"]["loader"] == "zipimporter"
    files = [UTILS + "_pkg/__init__.py", UTILS + "_pkg/mod.py", UTILS + "_flat.py"]
    assert sorted(once["compiled"]) == sorted(files)  # each once
    # canary: without it, this Python's zipimport compiles each file twice (else the test above proves nothing)
    assert sorted(name for name in plain["compiled"] if name in files) == sorted(files * 2)
    assert once["missing"] == plain["missing"] == "ImportError"
    assert once["finders"] == 1 and plain["finders"] == 0


def test_anything_not_in_a_zip_or_not_of_this_collection_is_left_to_the_import_system(tmp_path):
    folder = tmp_path / "ansible_collections" / "gpuops" / "fleet" / "plugins" / "module_utils"
    folder.mkdir(parents=True)
    (folder / "_here.py").write_text("X = 1\n")
    name = "ansible_collections.gpuops.fleet.plugins.module_utils._here"
    before = dict(sys.path_importer_cache)
    assert _compile_once.Finder.find_spec(name, [str(folder)]) is None
    assert str(folder) not in sys.path_importer_cache or sys.path_importer_cache == before
    assert _compile_once.Finder.find_spec("json", None) is None
    assert _compile_once.Finder.find_spec("ansible.module_utils.basic", [str(tmp_path / "x.zip")]) is None


def test_installed_once_just_before_the_path_finder():
    _compile_once.install()
    _compile_once.install()
    assert sys.meta_path.count(_compile_once.Finder) == 1
    assert sys.meta_path.index(_compile_once.Finder) + 1 == sys.meta_path.index(PathFinder)
    # ansible-test's import sanity test: sys.meta_path[0] is not changed
    assert sys.meta_path[0] is not _compile_once.Finder
