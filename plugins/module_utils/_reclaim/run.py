# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim from its parameters to its result, in one place: the module, bench/ and tests/gpu/ call run_reclaim().

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import open_nvml
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.containers import Runtimes
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.reclaim import Reclaim
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.diff import reclaim_diff
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import SpecError, budget_warning, build_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import mask_cmdlines
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.selection import SelectionError

# (pynvml, psutil), asked for once the parameters are valid (a module fails there, naming a missing package)
Libraries = t.Callable[[], t.Tuple[t.Any, t.Any]]


def run_reclaim(params: t.Mapping[str, t.Any], check_mode: bool, diff: bool, libraries: Libraries,
                find_cli: t.Optional[t.Callable[[str], t.Optional[str]]] = None) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """One gpu_reclaim run: (result, warnings, failed), the result as the module returns it (``msg`` and ``changed``
    always). A missing parameter takes its default (_reclaim/spec.py DEFAULTS). Bad input fails before
    ``libraries`` is asked for, so before NVML or any process is touched. ``find_cli(name)``: the path of a container
    runtime's command (docker, podman; the module's get_bin_path), for the containers that hold selected GPUs (default:
    the PATH's)."""
    try:
        spec = build_spec(params)
    except SpecError as exc:
        return {"msg": str(exc), "changed": False}, [], True
    warnings: t.List[str] = []
    warning = budget_warning(spec)
    if warning:
        warnings.append(warning)
    pynvml, psutil = libraries()
    try:
        with open_nvml(pynvml) as session:
            result = Reclaim(session, psutil, spec, check_mode, runtimes=Runtimes(find_cli)).run()
    except (NvmlError, SelectionError) as exc:
        return {"msg": str(exc), "changed": False}, warnings, True
    warnings.extend(result.pop("warnings_list"))
    if diff:
        result["diff"] = reclaim_diff(result["gpus"], check_mode)
    # a process's secret arguments (--api-key K) never leave the host
    return mask_cmdlines(result), warnings, result.get("verified") is False


def reclaim_in_module(module: t.Any, params: t.Mapping[str, t.Any], check_mode: bool,
                      beside: bool = False) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """gpu_reclaim in a module run, ``params`` its options: run_reclaim with the host's libraries, then the reading of
    ``secured`` beside it (when given). gpu_reclaim itself fails the module for a missing library; ``beside`` (the
    reclaim run by another module after its own work, vllm_lock's preflight, vllm_process's stop) returns that failure as
    the reclaim's result instead, so that the other module's own result is kept."""
    def libraries() -> t.Tuple[t.Any, t.Any]:
        _deps.require(module, _deps.PYNVML, _deps.PSUTIL)
        return _deps.PYNVML.module, _deps.PSUTIL.module

    if beside:
        for dep in (_deps.PYNVML, _deps.PSUTIL):
            if not dep.found:
                return {"msg": dep.message(), "changed": False}, [], True
    result, warnings, failed = run_reclaim(params, check_mode, bool(getattr(module, "_diff", False)), libraries,
                                           module.get_bin_path)
    if params.get("secured") is not None:
        # only the preflight's reading (the lock's run) judges the server on the port: a stop's reclaim does not compile
        # the listener's and the takeover's code
        # pylint: disable=import-outside-toplevel
        from ansible_collections.gpuops.fleet.plugins.module_utils._host.secured import judge
        from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import served_behind
        # pylint: enable=import-outside-toplevel
        _deps.require(module, _deps.PSUTIL)
        result["secured"], secured_warnings = judge(_deps.PSUTIL.module, params["secured"], behind=served_behind(_deps.PSUTIL.module))
        warnings = list(warnings) + secured_warnings
    return result, list(warnings), failed
