# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arrows between module_utils' packages point one way: read from every file's imports (ast, no code run).

_host reads the local host and imports no other package, nor does _http (the one plain HTTP request and the one
Prometheus text parser); _gpu may use _host; _reclaim may use both, _server those and _http;
_bench uses only _http, and the benchmark matrix report (_matrix) stands alone; the fleet report (_report) may read any of
them. The flat files (_deps, _argspec, _secrets) import no package. Nothing in module_utils imports a module, and every
import of this collection is absolute.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = "ansible_collections.gpuops.fleet.plugins."
MODULE_UTILS = ROOT + "module_utils"
FLAT = "flat"

# package -> the packages its files may import (besides the flat files, which everyone may import)
ALLOWED = {
    FLAT: set(),
    "_host": {"_host"},
    "_http": {"_http"},
    "_gpu": {"_host", "_gpu"},
    "_reclaim": {"_host", "_gpu", "_reclaim"},
    "_server": {"_http", "_host", "_gpu", "_server"},
    "_bench": {"_http", "_bench"},
    "_report": {"_http", "_host", "_gpu", "_reclaim", "_server", "_bench", "_report"},
    "_matrix": {"_matrix"},
    "_rollout": {"_matrix", "_rollout"},  # the rollout's gate reuses the matrix report's figures
}

HERE = os.path.dirname(os.path.abspath(__file__))
UTILS_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "plugins", "module_utils"))


def package_of(relpath: str) -> str:
    """``_gpu/nvml.py`` -> ``_gpu``; a file directly in module_utils -> FLAT."""
    parts = relpath.replace(os.sep, "/").split("/")
    return FLAT if len(parts) == 1 else parts[0]


def _targets(node: ast.AST) -> list:
    """Dotted names below ansible_collections.gpuops.fleet.plugins that ``node`` imports (empty for other imports)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.startswith(ROOT)]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith(ROOT):
        return [node.module + "." + alias.name for alias in node.names]
    return []


def violations(relpath: str, source: str) -> list:
    """Every import of ``source`` (the file ``relpath`` under module_utils) that breaks the rule, as text."""
    found = []
    mine = package_of(relpath)
    if mine not in ALLOWED:
        return ["%s: package %s has no rule in test_import_rules.ALLOWED; give it one" % (relpath, mine)]
    for node in ast.walk(ast.parse(source, relpath)):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.append("%s:%d: relative import (write the absolute ansible_collections... path)" % (relpath, node.lineno))
            continue
        for target in _targets(node):
            if not target.startswith(MODULE_UTILS + "."):
                found.append("%s:%d: imports %s (module_utils import no plugin, least of all a module)" % (relpath, node.lineno, target))
                continue
            first = target[len(MODULE_UTILS) + 1:].split(".")[0]
            if os.path.exists(os.path.join(UTILS_DIR, first + ".py")):
                theirs = FLAT
            elif first in ALLOWED and first != FLAT:
                theirs = first
            else:
                found.append("%s:%d: imports %s, which is neither a flat file nor a package with a rule" % (relpath, node.lineno, target))
                continue
            if theirs != FLAT and theirs not in ALLOWED[mine]:
                found.append("%s:%d: %s imports %s, an arrow the rule forbids" % (relpath, node.lineno, mine, target))
    return found


def utils_files() -> list:
    files = []
    for dirpath, _dirs, names in os.walk(UTILS_DIR):
        for name in names:
            if name.endswith(".py"):
                files.append(os.path.relpath(os.path.join(dirpath, name), UTILS_DIR))
    return sorted(files)


def test_module_utils_is_where_the_test_looks():
    files = utils_files()
    assert "_deps.py" in files and any(f.startswith("_host" + os.sep) for f in files), files


def test_no_package_has_an_init_with_code():
    for relpath in utils_files():
        if os.path.basename(relpath) == "__init__.py":
            with open(os.path.join(UTILS_DIR, relpath), encoding="utf-8") as handle:
                assert not handle.read().strip(), "%s must be empty (sanity)" % relpath


@pytest.mark.parametrize("relpath", utils_files())
def test_every_import_follows_the_rule(relpath):
    with open(os.path.join(UTILS_DIR, relpath), encoding="utf-8") as handle:
        source = handle.read()
    assert violations(relpath, source) == []


@pytest.mark.parametrize("relpath, source, expected", [
    ("_host/x.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import matches_any\n",
     "_host imports ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec.matches_any"),
    ("_host/x.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import nvml\n", "_host imports"),
    ("_gpu/x.py", "import ansible_collections.gpuops.fleet.plugins.module_utils._server.record\n", "_gpu imports"),
    ("_gpu/x.py", "def f():\n    from ansible_collections.gpuops.fleet.plugins.module_utils._bench import run\n", "_gpu imports"),
    ("_bench/x.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import trim_cmdline\n", "_bench imports"),
    ("_deps.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder\n", "flat imports"),
    ("_reclaim/x.py", "from ansible_collections.gpuops.fleet.plugins.modules import gpu_reclaim\n", "least of all a module"),
    ("_server/x.py", "from ..._host import processes\n", "relative import"),
    ("_newthing/x.py", "import os\n", "has no rule"),
    ("_gpu/x.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._nowhere import y\n", "neither a flat file"),
    ("_matrix/x.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import median\n", "_matrix imports"),
    ("_bench/x.py", "from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import analysis\n", "_bench imports"),
])
def test_the_checker_catches_a_bad_arrow(relpath, source, expected):
    """Canary: a synthetic file with a forbidden import is reported (else the test above proves nothing)."""
    found = violations(relpath, source)
    assert len(found) == 1 and expected in found[0], found


def test_the_checker_lets_allowed_arrows_pass():
    source = ("from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import trim_cmdline\n"
              "from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import nvml as _nvml\n"
              "from ansible_collections.gpuops.fleet.plugins.module_utils import _deps\n"
              "from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv\n")
    assert violations("_reclaim/x.py", source) == []
