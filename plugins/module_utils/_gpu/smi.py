# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fallback for hosts without nvidia-ml-py: ``nvidia-smi`` CSV queries, parsed.

What it cannot see, compared with NVML: graphics processes (only the compute list
has a CSV query), the CUDA driver and NVML versions, remapped rows, retired pages,
clock event reasons and topology (reported null), a lost GPU (nvidia-smi prints a
message instead of its row: passed on as a warning), and any optional field this
nvidia-smi does not know (e.g. memory.reserved before R510: null). Processes are
joined with psutil as with NVML, so PIDs of another PID namespace still show as
``visible: false``.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder


RunCommand = t.Callable[[t.List[str]], t.Tuple[int, str, str]]


class SmiError(Exception):
    """nvidia-smi failed; the message holds its command line, exit status and output."""

    @classmethod
    def of(cls, command: t.List[str], rc: int, out: str, err: str) -> "SmiError":
        return cls("%s failed (rc=%d): %s" % (" ".join(command), rc, (err or out).strip()))


def run_csv(run: RunCommand, command: t.List[str]) -> str:
    """Run an nvidia-smi query through ``run`` (AnsibleModule.run_command) and return its output; SmiError when it fails."""
    rc, out, err = run(command)
    if rc != 0:
        raise SmiError.of(command, rc, out, err)
    return out


def _enabled(word: str) -> bool:
    return word.lower() == "enabled"


class Field(t.NamedTuple):
    query: str  # --query-gpu name
    key: str  # gpu_facts key
    convert: t.Callable[[str], t.Any]
    required: bool  # False: dropped, and reported null, where this nvidia-smi does not know it


GPU_FIELDS: t.Tuple[Field, ...] = (
    Field("index", "index", int, True),
    Field("uuid", "uuid", str, True),
    Field("name", "name", str, True),
    Field("pci.bus_id", "pci_bus_id", str, True),
    Field("memory.total", "memory_total_mib", int, True),
    Field("memory.used", "memory_used_mib", int, True),
    Field("memory.free", "memory_free_mib", int, True),
    Field("driver_version", "driver_version", str, True),
    Field("memory.reserved", "memory_reserved_mib", int, False),
    Field("utilization.gpu", "utilization_gpu_pct", int, False),
    Field("utilization.memory", "utilization_memory_pct", int, False),
    Field("temperature.gpu", "temperature_c", int, False),
    Field("power.draw", "power_draw_w", float, False),
    Field("power.limit", "power_limit_w", float, False),
    Field("persistence_mode", "persistence_mode", _enabled, False),
    Field("mig.mode.current", "mig_mode", _enabled, False),
    Field("ecc.mode.current", "ecc_mode", _enabled, False),
    Field("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected_volatile", int, False),
    Field("pstate", "performance_state", str, False),
)

_REJECTED = re.compile(r'Field "([^"]+)" is not a valid field to query')


def gpu_command(smi: str, fields: t.Sequence[Field] = GPU_FIELDS) -> t.List[str]:
    return [smi, "--query-gpu=" + ",".join(field.query for field in fields), "--format=csv,noheader,nounits"]


def apps_command(smi: str) -> t.List[str]:
    return [smi, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]


def query_gpus(run: RunCommand, smi: str) -> t.Tuple[t.List[t.Dict[str, t.Any]], t.List[str]]:
    """parse_gpus() of a --query-gpu run; fields this nvidia-smi rejects are dropped if optional (their keys are absent)."""
    fields = list(GPU_FIELDS)
    while True:
        command = gpu_command(smi, fields)
        rc, out, err = run(command)
        rejected = _REJECTED.search(out + err)
        optional = [field for field in fields if not field.required and rejected and field.query == rejected.group(1)]
        if rc != 0 and optional:
            fields.remove(optional[0])
            continue
        if rc != 0:
            raise SmiError.of(command, rc, out, err)
        return parse_gpus(out, fields)


def _value(word: str, convert: t.Callable[[str], t.Any]) -> t.Any:
    """None for nvidia-smi's placeholders: [N/A], [Not Supported], N/A, [Unknown Error] ..."""
    word = word.strip()
    if not word or word.startswith("[") or word == "N/A":
        return None
    try:
        return convert(word)
    except ValueError:
        return None


def parse_gpus(output: str, fields: t.Sequence[Field] = GPU_FIELDS) -> t.Tuple[t.List[t.Dict[str, t.Any]], t.List[str]]:
    """Rows of the --query-gpu CSV (``fields`` in order, index first) as dicts keyed like gpu_facts, and the lines that are not rows."""
    rows: t.List[t.Dict[str, t.Any]] = []
    other: t.List[str] = []
    for line in output.splitlines():
        words = line.split(",")
        if len(words) != len(fields) or not words[0].strip().isdigit():
            if line.strip():
                other.append(line.strip())
            continue
        rows.append({field.key: _value(word, field.convert) for field, word in zip(fields, words)})
    return rows, other


def parse_apps(output: str) -> t.List[t.Tuple[str, Holder]]:
    """(GPU UUID, holder) for each row of the --query-compute-apps CSV."""
    holders: t.List[t.Tuple[str, Holder]] = []
    for line in output.splitlines():
        words = [word.strip() for word in line.split(",")]
        if len(words) != 3 or not words[1].isdigit():
            continue
        holders.append((words[0], Holder(int(words[1]), _value(words[2], int), "compute")))
    return holders
