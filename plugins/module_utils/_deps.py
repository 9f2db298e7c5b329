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
    """One optional Python import and the PyPI package that provides it."""

    def __init__(self, import_name: str, package: str, reason: str) -> None:
        self.import_name = import_name
        self.package = package
        self.reason = reason
        self.module: t.Any = None
        self.traceback: t.Optional[str] = None

    @property
    def found(self) -> bool:
        return self.module is not None

    def message(self) -> str:
        """The failure message: which package to install, and why."""
        return missing_required_lib(self.package, reason=self.reason)


PYNVML = Dependency("pynvml", "nvidia-ml-py", "to read GPU state through NVML")
PSUTIL = Dependency("psutil", "psutil", "to name the processes that hold GPU memory")

try:
    with warnings.catch_warnings():
        # the deprecated 'pynvml' PyPI package hooks this import with a FutureWarning
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml as _pynvml
    PYNVML.module = _pynvml
except ImportError:
    PYNVML.traceback = traceback.format_exc()

try:
    import psutil as _psutil
    PSUTIL.module = _psutil
except ImportError:
    PSUTIL.traceback = traceback.format_exc()


def require(module: AnsibleModule, *deps: Dependency) -> None:
    """Fail the module, naming the package to install, for the first missing dependency."""
    for dep in deps:
        if not dep.found:
            module.fail_json(msg=dep.message(), exception=dep.traceback)
