# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arrows between module_utils' packages point one way: read from every file's imports (ast, no code run).

_host reads the local host and imports no other package, nor does _http (the one plain HTTP request and the one
Prometheus text parser); _gpu may use _host; _reclaim may use both, _server those and _http;
_bench uses only _http, and the benchmark matrix report (_matrix) stands alone; the fleet report (_report) may read any of
them, and the metrics endpoint (_watch) the fleet report's reading and what it uses. The flat files (_deps, _argspec,
_secrets) import no package. Nothing in module_utils imports a module, and every
import of this collection is absolute.

Over the whole of plugins/, each concept has one place: /proc is read in _host, Prometheus text parsed in
_http/prometheus.py, a plain HTTP request made in _http/request.py, HTTP served only by _watch/serve.py, and code that only the controller uses lives in
plugin_utils (module_utils import nothing of the controller).
"""

from __future__ import annotations

import ast
import os
import typing as t

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
    # the metrics endpoint shows the fleet report's reading and classification, and the server's checks
    "_watch": {"_http", "_host", "_gpu", "_reclaim", "_server", "_report", "_watch"},
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


# --- one place per concept, over the whole of plugins/ ------------------------------------------------------------
#
# /proc is read only in module_utils/_host; Prometheus text is parsed only in module_utils/_http/prometheus.py; a plain
# HTTP request is made only in module_utils/_http/request.py (the benchmark's streaming client, _bench/client.py, opens
# its own connections); module_utils imports nothing of the controller (plugin_utils, ansible.errors, ansible.plugins,
# ...); and no code in module_utils serves the controller alone (what only action, filter, lookup or plugin_utils
# code imports belongs in plugin_utils).

PLUGINS_DIR = os.path.dirname(UTILS_DIR)
PROC_READER = "module_utils/_host/"
PROMETHEUS_PARSER = "module_utils/_http/prometheus.py"
HTTP_CLIENT = "module_utils/_http/request.py"
HTTP_SERVER = "module_utils/_watch/serve.py"  # the metrics endpoint: the one file that serves HTTP
SERVER_MODULES = ("http.server", "socketserver")
STREAMING_CLIENT = "module_utils/_bench/client.py"
HTTP_MODULES = ("http.client", "urllib.request", "urllib.error", "urllib3", "requests", "httpx", "http.server",
                "ansible.module_utils.urls")
CONNECTS = ("socket", "create_connection", "open_connection")  # socket.socket(), socket.create_connection(), asyncio's
CONTROLLER_KINDS = ("action", "filter", "lookup", "plugin_utils")
DOC_NAMES = ("DOCUMENTATION", "EXAMPLES", "RETURN")
# a metric name's characters in the exposition format: a pattern with them is a Prometheus parser
PROMETHEUS_PATTERNS = ("a-zA-Z_:", "a-zA-Z0-9_:")


def plugin_files() -> list:
    """Every Python file under plugins/, relative to it."""
    files = []
    for dirpath, _dirs, names in os.walk(PLUGINS_DIR):
        for name in names:
            if name.endswith(".py"):
                files.append(os.path.relpath(os.path.join(dirpath, name), PLUGINS_DIR).replace(os.sep, "/"))
    return sorted(files)


def _code_strings(tree: ast.AST) -> list:
    """(line, text) of every string constant of the code: docstrings and DOCUMENTATION/EXAMPLES/RETURN left out."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id in DOC_NAMES for target in node.targets):
            skip.add(id(node.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip]


def _imported(tree: ast.AST) -> list:
    """(line, dotted names) of every import: ``from a import b`` names a and a.b (b may be a module)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, [alias.name]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, [node.module] + [node.module + "." + alias.name for alias in node.names]))
    return found


def _first(names: list, wanted: t.Callable[[str], bool]) -> t.Optional[str]:
    return next((name for name in names if wanted(name)), None)


def _controller_side(name: str) -> bool:
    return name.startswith(ROOT + "plugin_utils") or (name.startswith("ansible.") and not name.startswith("ansible.module_utils"))


def place_violations(relpath: str, source: str) -> list:
    """What the file ``relpath`` (under plugins/) does that belongs to another file's one place, as text."""
    tree = ast.parse(source, relpath)
    found = []
    if not relpath.startswith(PROC_READER):
        found += ["%s:%d: reads /proc (%r): only module_utils/_host does" % (relpath, line, text)
                  for line, text in _code_strings(tree) if "/proc" in text]
    if relpath != PROMETHEUS_PARSER:
        found += ["%s:%d: a Prometheus text pattern (%r): parse with _http/prometheus.py" % (relpath, line, text)
                  for line, text in _code_strings(tree) if any(pattern in text for pattern in PROMETHEUS_PATTERNS)]
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls = {sub.func.attr for sub in ast.walk(node) if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)}
                texts = {sub.value for sub in ast.walk(node) if isinstance(sub, ast.Constant) and isinstance(sub.value, str)}
                if "startswith" in calls and "#" in texts and any("{" in text for text in texts):
                    found.append("%s:%d: %s() reads exposition lines (comments, labels): parse with _http/prometheus.py"
                                 % (relpath, node.lineno, node.name))
    if relpath != HTTP_CLIENT:
        def wrong(name: str) -> bool:
            return name in HTTP_MODULES and not (relpath == HTTP_SERVER and name in SERVER_MODULES)
        found += ["%s:%d: imports %s: a plain HTTP request goes through _http/request.py" % (relpath, line, name)
                  for line, name in ((line, _first(names, wrong)) for line, names in _imported(tree)) if name]
        if relpath != STREAMING_CLIENT:
            found += ["%s:%d: opens a connection (%s): a plain HTTP request goes through _http/request.py" % (relpath, node.lineno, node.func.attr)
                      for node in ast.walk(tree)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONNECTS]
    if relpath.startswith("module_utils/"):
        found += ["%s:%d: imports %s: module_utils run on the host, without the controller's code" % (relpath, line, name)
                  for line, name in ((line, _first(names, _controller_side)) for line, names in _imported(tree)) if name]
    return found


@pytest.mark.parametrize("relpath", plugin_files())
def test_every_concept_is_in_its_one_place(relpath):
    with open(os.path.join(PLUGINS_DIR, relpath), encoding="utf-8") as handle:
        source = handle.read()
    assert place_violations(relpath, source) == []


def controller_only(sources: dict) -> list:
    """Top-level functions and classes of module_utils that only controller code (action, filter, lookup, plugin_utils)
    imports: no module and no module_utils file imports them, and their own file does not use them. ``sources``:
    relpath under plugins/ -> source."""
    importers: dict = {}
    trees = {relpath: ast.parse(source, relpath) for relpath, source in sources.items()}
    for relpath, tree in trees.items():
        kind = relpath.split("/")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(MODULE_UTILS + "."):
                for alias in node.names:
                    importers.setdefault((node.module, alias.name), set()).add(kind)
    found = []
    for relpath, tree in trees.items():
        if not relpath.startswith("module_utils/"):
            continue
        dotted = ROOT + relpath[:-len(".py")].replace("/", ".")
        used_here = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                continue
            kinds = importers.get((dotted, node.name), set())
            if kinds and kinds <= set(CONTROLLER_KINDS) and node.name not in used_here:
                found.append("%s:%d: %s serves only %s code: it belongs in plugin_utils"
                             % (relpath, node.lineno, node.name, ", ".join(sorted(kinds))))
    return found


def test_no_controller_only_code_in_module_utils():
    sources = {}
    for relpath in plugin_files():
        with open(os.path.join(PLUGINS_DIR, relpath), encoding="utf-8") as handle:
            sources[relpath] = handle.read()
    assert any(relpath.startswith("action/") for relpath in sources) and any(relpath.startswith("modules/") for relpath in sources)
    assert controller_only(sources) == []


@pytest.mark.parametrize("relpath, source, expected", [
    ("module_utils/_server/x.py", 'STAT = "/proc/%d/stat"\n', "reads /proc"),
    ("module_utils/_reclaim/x.py", 'def f(pid):\n    return open("/proc/%d/wchan" % pid).read()\n', "reads /proc"),
    ("plugin_utils/x.py", 'import os\nNS = os.path.join("/proc", "self", "ns", "pid")\n', "reads /proc"),
    ("module_utils/_bench/x.py", 'import re\n_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")\n', "Prometheus text pattern"),
    ("module_utils/_server/x.py",
     'def metric(text):\n    for line in text.splitlines():\n        if line.startswith("#"):\n            continue\n'
     '        name, _, rest = line.partition("{")\n', "reads exposition lines"),
    ("module_utils/_bench/x.py",
     'def sample(line):\n    if line.startswith("#"):\n        return None\n    return line[:line.index("{")]\n', "reads exposition lines"),
    ("module_utils/_bench/x.py", "import urllib.request\n", "imports urllib.request"),
    ("module_utils/_server/x.py", "import http.client\n", "imports http.client"),
    ("module_utils/_watch/x.py", "import http.server\n", "imports http.server"),
    (HTTP_SERVER, "import http.client\n", "imports http.client"),
    ("modules/x.py", "from ansible.module_utils.urls import open_url\n", "imports ansible.module_utils.urls"),
    ("module_utils/_report/x.py", "import socket\ndef f():\n    return socket.create_connection(('h', 1))\n", "opens a connection"),
    ("module_utils/_server/x.py", "from ansible_collections.gpuops.fleet.plugins.plugin_utils._lock_controller import who\n",
     "without the controller's code"),
    ("module_utils/_server/x.py", "from ansible.errors import AnsibleError\n", "without the controller's code"),
])
def test_the_place_checker_catches_a_concept_out_of_place(relpath, source, expected):
    """Canary: each synthetic file does one thing out of its place, and that is reported (else the test proves nothing)."""
    found = place_violations(relpath, source)
    assert len(found) == 1 and expected in found[0], found


def test_the_place_checker_lets_each_place_do_its_own_thing():
    assert place_violations("module_utils/_host/x.py", 'STAT = "/proc/%d/stat"\n') == []
    assert place_violations(PROMETHEUS_PARSER, 'import re\n_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")\n') == []
    assert place_violations(HTTP_CLIENT, "import http.client\nimport socket\ndef f():\n    return socket.socket()\n") == []
    assert place_violations(HTTP_SERVER, "import http.server\n") == []
    assert place_violations(STREAMING_CLIENT, "def f(loop):\n    return loop.create_connection(None, 'h', 1)\n") == []
    assert place_violations("modules/x.py", 'DOCUMENTATION = "reads C(/proc/PID/environ)"\n') == []
    assert place_violations("module_utils/_server/x.py", '"""Reads nothing of /proc itself."""\n') == []


def test_the_controller_only_check_catches_code_only_the_controller_uses():
    """Canary: a function that only an action plugin imports is reported; one a module also imports, or one its own
    file uses, is not."""
    lock = ROOT + "module_utils._server.lock"
    sources = {
        "module_utils/_server/lock.py": "def acquire():\n    pass\n\ndef who():\n    pass\n\ndef identity():\n    pass\n\n"
                                        "def start():\n    pass\n\ndef verdict(probe=start):\n    pass\n",
        "action/vllm_lock.py": "from %s import identity, start, who\n" % lock,
        "modules/vllm_lock.py": "from %s import acquire, who\n" % lock,
    }
    found = controller_only(sources)
    assert len(found) == 1 and "identity serves only action code" in found[0], found
