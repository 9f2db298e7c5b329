# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_watch): the metrics endpoint of a GPU host (docs/watch.md). It may import the flat files of
# module_utils, _http, _host, _gpu, _reclaim, _server and _report (whose reading and classification it shows); never a
# module or a plugin, and no other package imports it.

"""The endpoint's installation on a host (the gpu_watch module): its code, its systemd unit, and the service.

The code is the collection's own: the files of module_utils that serve.py imports, directly or not, read through the
import system from wherever this run has them (the module's zip on a host, the checkout in a test), and written under
``DIR/lib/ansible_collections/...``. So the host runs exactly the reading gpu_facts and the fleet report run, with the
Python of the environment prepare_hosts builds (nvidia-ml-py, psutil): nothing of Ansible is needed there.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_if_changed

ROOT_PACKAGE = "ansible_collections.gpuops.fleet.plugins.module_utils"
ENTRY = ROOT_PACKAGE + "._watch.serve"
UNIT_NAME = "gpuops-watch.service"
UNIT_DIR = "/etc/systemd/system"
DEFAULT_DIR = "/opt/gpuops-fleet/watch"
DEFAULT_PYTHON = "/opt/gpuops-fleet/venv/bin/python"
# a word of the unit's ExecStart= or Environment= that systemd takes as it is: no space, quote, $, % or \
SAFE_WORD = re.compile(r"^[A-Za-z0-9_./:@+,=-]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class InstallError(Exception):
    """A value that cannot go into the unit, or a step that failed; the message names it."""


def _imported(name: str, source: str) -> t.List[str]:
    """Modules of ROOT_PACKAGE that the source of ``name`` imports, at any depth of its code (a lazy import too)."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith(ROOT_PACKAGE + ".")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith(ROOT_PACKAGE):
            if node.module != ROOT_PACKAGE:
                found.append(node.module)
            found += [node.module + "." + alias.name for alias in node.names]
    return found


def _source(name: str) -> t.Optional[str]:
    """The source of module ``name`` (None when it is not a module: a function or a constant imported by name)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    spec = getattr(module, "__spec__", None)
    if spec is None or spec.submodule_search_locations is not None:
        return None  # a package (this collection's have no __init__.py): its modules are listed one by one
    loader = getattr(spec, "loader", None)
    if loader is None or not hasattr(loader, "get_source"):
        return None
    try:
        return loader.get_source(name)
    except ImportError:
        return None


def sources(entry: str = ENTRY) -> t.Dict[str, str]:
    """Relative path (``ansible_collections/.../serve.py``) -> source of ``entry`` and every module of this collection it
    imports, directly or not."""
    found: t.Dict[str, str] = {}
    todo, seen = [entry], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        text = _source(name)
        if text is None:
            continue
        found[name.replace(".", "/") + ".py"] = text
        todo += _imported(name, text)
    return found


def _word(option: str, value: t.Any) -> str:
    text = str(value)
    if not SAFE_WORD.match(text):
        raise InstallError("%s: %r may hold only letters, digits and . _ / : @ + , = - (it goes into the systemd unit as it is)"
                           % (option, text))
    return text


def exec_argv(python: str, settings: t.Mapping[str, t.Any]) -> t.List[str]:
    """The endpoint's command line: ``python -m ENTRY`` and its settings (serve.parser's flags)."""
    argv = [_word("python", python), "-m", ENTRY]
    for key in ("listen", "port", "interval", "host", "state_dir", "generate_timeout", "health_timeout"):
        argv += ["--" + key.replace("_", "-"), _word(key, settings[key])]
    return argv


def unit_text(python: str, lib: str, settings: t.Mapping[str, t.Any], environment: t.Mapping[str, t.Any]) -> str:
    """The unit: the endpoint as root (it reads every process's /proc and the role's 0600 records), restarted when it
    fails; the environment (LD_LIBRARY_PATH for NVML, ...) as Environment= lines."""
    env = {"PYTHONPATH": lib, "PYTHONDONTWRITEBYTECODE": "1"}
    for key, value in sorted(environment.items()):
        if not ENV_NAME.match(str(key)):
            raise InstallError("environment: %r is not a variable name" % (key,))
        env[str(key)] = _word("environment.%s" % key, value)
    lines = [
        "# Ansible managed: the gpuops.fleet metrics endpoint, installed by gpuops.fleet.gpu_watch (playbooks/watch_setup.yml);",
        "# edits are overwritten. See docs/watch.md.",
        "[Unit]",
        "Description=gpuops.fleet metrics endpoint (GPU memory by holder, vLLM servers) on port %s" % settings["port"],
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=exec",
    ]
    lines += ["Environment=%s=%s" % (key, value) for key, value in env.items()]
    lines += [
        "ExecStart=%s" % " ".join(exec_argv(python, settings)),
        "Restart=on-failure",
        "RestartSec=5",
        "NoNewPrivileges=yes",
        "ProtectSystem=full",
        "StandardOutput=journal",
        "StandardError=journal",
        "SyslogIdentifier=gpuops-watch",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def _tree(folder: str) -> t.List[str]:
    """Every file under ``folder``, relative to it."""
    found = []
    for dirpath, dirs, names in os.walk(folder):
        dirs[:] = [name for name in dirs if name != "__pycache__"]  # Python's own cache is left to Python
        found += [os.path.relpath(os.path.join(dirpath, name), folder) for name in names]
    return sorted(found)


def write_code(lib: str, files: t.Mapping[str, str], check_mode: bool) -> t.List[str]:
    """Put ``files`` under ``lib`` and remove any other file there (an older version's); the paths that changed."""
    changed = [path for path in sorted(files) if write_if_changed(os.path.join(lib, path), files[path], check_mode)]
    if os.path.isdir(lib):
        for stale in _tree(lib):
            if stale not in files:
                changed.append(stale)
                if not check_mode:
                    os.unlink(os.path.join(lib, stale))
    return changed


def remove_tree(folder: str, check_mode: bool) -> bool:
    if not os.path.exists(folder):
        return False
    if not check_mode:
        shutil.rmtree(folder)
    return True
