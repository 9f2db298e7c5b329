# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Optional third-party imports, declared once and validated once.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import traceback
import typing as t
import warnings

from ansible.module_utils.basic import missing_required_lib

if t.TYPE_CHECKING:
    from ansible.module_utils.basic import AnsibleModule


class Dependency:
    """One optional Python import and the PyPI package that provides it, imported on first use.

    A module pays for an import only when it reads ``module`` or ``found``: vllm_lock and vllm_process never load
    nvidia-ml-py, and each module run is a fresh interpreter on the host, paying its imports again.
    """

    def __init__(self, import_name: str, package: str, reason: str, importer: t.Callable[[], t.Any]) -> None:
        self.import_name = import_name
        self.package = package
        self.reason = reason
        self._importer = importer
        self._module: t.Any = None
        self._tried = False
        self._traceback: t.Optional[str] = None

    def _load(self) -> None:
        if self._tried:
            return
        self._tried = True
        try:
            self._module = self._importer()
        except ImportError:
            self._traceback = traceback.format_exc()

    @property
    def module(self) -> t.Any:
        self._load()
        return self._module

    @module.setter
    def module(self, value: t.Any) -> None:
        # unit tests put a fake in place; it counts as the import's result
        self._tried = True
        self._module = value

    @property
    def traceback(self) -> t.Optional[str]:
        self._load()
        return self._traceback

    @property
    def found(self) -> bool:
        return self.module is not None

    def message(self) -> str:
        """The failure message: which package to install, and why."""
        return missing_required_lib(self.package, reason=self.reason)


def _import_pynvml() -> t.Any:
    with warnings.catch_warnings():
        # the deprecated 'pynvml' PyPI package hooks this import with a FutureWarning
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml  # pylint: disable=import-outside-toplevel
    return pynvml


def _import_psutil() -> t.Any:
    import psutil  # pylint: disable=import-outside-toplevel
    return psutil


PYNVML = Dependency("pynvml", "nvidia-ml-py", "to read GPU state through NVML", _import_pynvml)
PSUTIL = Dependency("psutil", "psutil", "to name the processes that hold GPU memory", _import_psutil)


def require(module: AnsibleModule, *deps: Dependency) -> None:
    """Fail the module, naming the package to install, for the first missing dependency."""
    for dep in deps:
        if not dep.found:
            module.fail_json(msg=dep.message(), exception=dep.traceback)


def gpu_reader_hooks(module: AnsibleModule) -> t.Tuple[t.Any, t.Any, t.Callable[[str], None], t.Callable[[], t.Optional[str]], t.Any]:
    """What a module hands a reading of the host's GPUs (_gpu.facts.run_facts, _report.reading.run_reading), after its
    params: pynvml and psutil (None when missing), ``require(name)`` ("pynvml", "psutil"), which fails the module naming
    the package, nvidia-smi's path (None when it is not installed) and the module's run_command."""
    deps = {"pynvml": PYNVML, "psutil": PSUTIL}
    return (PYNVML.module, PSUTIL.module, lambda name: require(module, deps[name]), lambda: module.get_bin_path("nvidia-smi"),
            module.run_command)
