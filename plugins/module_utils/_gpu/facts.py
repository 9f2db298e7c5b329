# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_facts' ansible_facts, from NVML or from the nvidia-smi fallback.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host import pid_trust as _pid_trust
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import ContainerReader
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import smi as _smi
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import mask_cmdlines
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder, NvmlSession, open_nvml
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.device import empty_device, read_device
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_processes
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.selection import GpuRef, SelectionError, parse_gpus, resolve_gpus
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.topology import read_topology


# gpu_facts' defaults, for a parameter that is missing (the module's ARGUMENT_SPEC names them from here)
DEFAULTS: t.Dict[str, t.Any] = {"gpus": None, "processes": True, "topology": False, "health": True}


class Options(t.NamedTuple):
    gpus: t.Optional[t.List[GpuRef]]
    processes: bool
    topology: bool
    health: bool

    @classmethod
    def from_params(cls, params: t.Mapping[str, t.Any]) -> "Options":
        """The module's parameters (a missing one takes its default from DEFAULTS). Raises SelectionError."""
        def get(option: str) -> t.Any:
            return params[option] if option in params else DEFAULTS[option]

        return cls(parse_gpus(get("gpus")), bool(get("processes")), bool(get("topology")), bool(get("health")))


def _attach_processes(psutil: t.Any, devices: t.List[t.Dict[str, t.Any]], holders: t.Mapping[int, t.List[Holder]],
                      containers: ContainerReader, reread: t.Optional[t.Callable[[int], t.List[Holder]]] = None) -> None:
    """Set each device's ``processes``; a PID on several GPUs is described once.

    ``containers``: the container of each visible holder, from its cgroup (None for a PID this namespace does not have,
    or that is not taken for the GPU process: its cgroup would be another process's).

    ``reread(index)``: a second NVML reading of a GPU, asked for when a listed PID is not in this namespace; a PID
    that it no longer lists exited during the reading and is left out (it is not another namespace's process).
    Where NVML's PIDs are not trusted (see _host/pid_trust.py), a local process without an NVIDIA device file open is not
    named as the holder: its entry says ``unverified`` and has only what NVML said.
    """
    infos = describe_processes(psutil, (holder.pid for found in holders.values() for holder in found))
    holders = dict(holders)
    for index, found in list(holders.items()):
        if reread is not None and any(not infos[holder.pid]["visible"] for holder in found):
            try:
                listed = {holder.pid for holder in reread(index)}
            except NvmlError:
                continue
            holders[index] = [holder for holder in found if infos[holder.pid]["visible"] or holder.pid in listed]
    trust = _pid_trust.assess({holder.pid for found in holders.values() for holder in found if not infos[holder.pid]["visible"]})
    for pid, info in infos.items():
        info["unverified"] = bool(info["visible"] and not trust.verified(pid))
        if info["unverified"]:
            info.update(name=None, cmdline=None, username=None, state=None, ppid=None, create_time=None, visible=False)
        info["container"] = containers.describe(pid) if info["visible"] else None
    for device in devices:
        found = holders.get(device["index"])
        device["processes"] = None if found is None else [process_fact(holder, infos[holder.pid]) for holder in found]


def from_nvml(session: NvmlSession, options: Options, psutil: t.Any, containers: ContainerReader) -> t.Dict[str, t.Any]:
    """ansible_facts read through NVML. Raises SelectionError (bad ``gpus``) or NvmlError (NVML as a whole fails).
    Values NVML refused with NVML_ERROR_NO_PERMISSION are null and named in ``session.denied``."""
    indices = resolve_gpus(options.gpus, session.count, session.inventory)
    driver = session.driver()
    driver["source"] = "nvml"
    devices: t.List[t.Dict[str, t.Any]] = []
    holders: t.Dict[int, t.List[Holder]] = {}
    for index in indices:
        device = read_device(session, index, options.health)
        if options.processes and device["error"] is None:
            try:
                holders[index] = session.holders(index)
            except NvmlError as exc:
                device["error"] = "GPU %d: cannot list its processes: %s" % (index, exc)
        devices.append(device)
    facts: t.Dict[str, t.Any] = {"gpus": devices, "gpu_driver": driver}
    if options.processes:
        _attach_processes(psutil, devices, holders, containers, session.holders)
    if options.topology:
        facts["gpu_topology"] = read_topology(session, {device["index"]: device["pci_bus_id"] for device in devices})
    return facts


def from_smi(run: _smi.RunCommand, smi: str, options: Options, psutil: t.Any,
             containers: ContainerReader) -> t.Tuple[t.Dict[str, t.Any], t.List[str]]:
    """ansible_facts read from nvidia-smi's CSV output, and warnings. Raises SelectionError, or SmiError when nvidia-smi fails."""
    rows, other = _smi.query_gpus(run, smi)
    warnings = ["nvidia-smi: " + line for line in other]
    # a GPU nvidia-smi cannot read has no row: count up to the highest index seen
    count = max(row["index"] for row in rows) + 1 if rows else 0
    indices = resolve_gpus(options.gpus, count, lambda: [(row["index"], row["uuid"]) for row in rows])
    driver_version = rows[0]["driver_version"] if rows else None
    devices: t.List[t.Dict[str, t.Any]] = []
    for row in rows:
        if row["index"] not in indices:
            continue
        device = empty_device(row["index"], options.health, None)
        device.update((key, value) for key, value in row.items() if key in device)  # driver_version goes to gpu_driver
        devices.append(device)
    if options.processes:
        by_uuid: t.Dict[t.Optional[str], t.List[Holder]] = {device["uuid"]: [] for device in devices}
        for uuid, holder in _smi.parse_apps(_smi.run_csv(run, _smi.apps_command(smi))):
            if uuid in by_uuid:
                by_uuid[uuid].append(holder)
        _attach_processes(psutil, devices, {device["index"]: by_uuid[device["uuid"]] for device in devices}, containers)
    facts: t.Dict[str, t.Any] = {
        "gpus": devices,
        "gpu_driver": {"driver_version": driver_version, "cuda_driver_version": None, "nvml_version": None, "count": len(rows), "source": "nvidia-smi"},
    }
    if options.topology:
        facts["gpu_topology"] = None
        warnings.append("topology is not read without nvidia-ml-py: gpu_topology is null")
    return facts, warnings


SMI_WARNING = ("nvidia-ml-py is not installed: facts come from nvidia-smi, which cannot see graphics processes, lost GPUs,"
               " remapped rows, retired pages, clock event reasons or topology. Install nvidia-ml-py on this host.")


def run_facts(params: t.Mapping[str, t.Any], pynvml: t.Any, psutil: t.Any, require: t.Callable[[str], None],
              find_smi: t.Callable[[], t.Optional[str]] = lambda: None,
              run_command: t.Optional[_smi.RunCommand] = None,
              find_cli: t.Optional[t.Callable[[str], t.Optional[str]]] = None) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """One gpu_facts run, from its parameters: (result, warnings, failed), the result as the module returns it.

    ``pynvml``, ``psutil``: the imported modules, or None when missing; ``require(name)`` ("psutil", "pynvml") is
    called for one that is missing but needed (a module fails there, naming the package; if it returns, the run
    fails saying what is missing). Without nvidia-ml-py,
    ``find_smi()`` gives nvidia-smi's path (None: not installed) and ``run_command`` runs it. ``find_cli(name)``: the
    path of a container runtime's command (docker, podman), asked a holder's container's name and image (default: the
    PATH's).
    Bad input fails before anything is read.
    """
    try:
        options = Options.from_params(params)
    except SelectionError as exc:
        return {"msg": str(exc)}, [], True
    if options.processes and psutil is None:
        require("psutil")
        return {"msg": "psutil is needed to name the processes that hold GPU memory"}, [], True
    smi = None if pynvml is not None else find_smi()
    if smi is None and pynvml is None:
        require("pynvml")
        return {"msg": "nvidia-ml-py (or nvidia-smi) is needed to read GPU state"}, [], True
    warnings: t.List[str] = []
    try:
        if smi is None:
            with open_nvml(pynvml) as session:
                facts = from_nvml(session, options, psutil, ContainerReader(find_cli))
                warnings.extend("NVML_ERROR_NO_PERMISSION: %s was refused, so its value is null: run the task with become: true,"
                                " or as a user with access to /dev/nvidia*" % denied for denied in session.denied)
        else:
            if run_command is None:
                raise _smi.SmiError("nvidia-smi: no way to run it was given")
            warnings.append(SMI_WARNING)
            facts, smi_warnings = from_smi(run_command, smi, options, psutil, ContainerReader(find_cli))
            warnings.extend(smi_warnings)
    except (NvmlError, SelectionError, _smi.SmiError) as exc:
        return {"msg": str(exc)}, warnings, True
    # a process's secret arguments (--api-key K) never leave the host
    return {"changed": False, "ansible_facts": mask_cmdlines(facts)}, warnings, False


def process_fact(holder: Holder, info: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """One entry of a GPU's ``processes``: the NVML holder and its psutil description."""
    fact = {"pid": holder.pid, "used_memory_mib": holder.used_memory_mib, "type": holder.type}
    fact.update(info)
    return fact
