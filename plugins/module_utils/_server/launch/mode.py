# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The launch mode of a server and the backend that runs it: ``process`` (a detached process with a record),
``systemd`` (a unit) or ``container`` (a podman or docker container). ``auto`` is systemd where systemd runs the
host (/run/systemd/system is a directory), else process.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import types
import typing as t

MODES = ("auto", "process", "systemd", "container")
SYSTEMD_RUNS = "/run/systemd/system"
# the container mode's runtimes and option defaults, here for the option specs that name them (the container backend
# itself is imported by backend() only for that mode)
PODMAN = "podman"
DOCKER = "docker"
RUNTIMES = (PODMAN, DOCKER)  # the order in which a runtime is looked for when none is given
HOST_NETWORK = "host"
DEFAULT_CDI_KIND = "nvidia.com/gpu"


def resolve_mode(mode: t.Optional[str], systemd_dir: str = SYSTEMD_RUNS) -> str:
    """``mode`` itself, or for ``auto`` (and None): systemd when ``systemd_dir`` is a directory, else process."""
    if mode in (None, "auto"):
        return "systemd" if os.path.isdir(systemd_dir) else "process"
    if mode not in MODES:
        raise ValueError("mode: expected one of %s, got %r" % (", ".join(MODES), mode))
    return str(mode)


def backend(mode: str) -> types.ModuleType:
    """The backend module of a resolved ``mode``: status(), stop() and launch() with the same arguments in each.

    Imported here, for the mode asked: a module run compiles its imports from source (no bytecode cache in the module's
    zip), and one that reads nothing else of a mode needs only the backend of its server's."""
    # pylint: disable=import-outside-toplevel
    resolved = resolve_mode(mode)
    if resolved == "container":
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import container as found
    elif resolved == "systemd":
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import systemd as found
    else:
        from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import process as found
    return found
