# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fallback for hosts without nvidia-ml-py: ``nvidia-smi`` CSV queries, parsed.

What it cannot see, compared with NVML: graphics processes (only the compute list
has a CSV query), the driver's reserved memory, CUDA driver and NVML versions,
remapped rows, retired pages, clock event reasons and topology (reported null),
and a lost GPU's index (nvidia-smi prints a message instead of a row).

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._nvml import Holder


class SmiError(Exception):
    """nvidia-smi failed; the message holds its command line, exit status and output."""


def run_csv(run: t.Callable[[t.List[str]], t.Tuple[int, str, str]], command: t.List[str]) -> str:
    """Run an nvidia-smi query through ``run`` (AnsibleModule.run_command) and return its output; SmiError when it fails."""
    rc, out, err = run(command)
    if rc != 0:
        raise SmiError("%s failed (rc=%d): %s" % (" ".join(command), rc, (err or out).strip()))
    return out


def _int(word: str) -> int:
    return int(word)


def _float(word: str) -> float:
    return float(word)


def _str(word: str) -> str:
    return word


def _enabled(word: str) -> bool:
    return word.lower() == "enabled"


# (--query-gpu field, fact key, conversion); in the order of the CSV columns
GPU_FIELDS: t.Tuple[t.Tuple[str, str, t.Callable[[str], t.Any]], ...] = (
    ("index", "index", _int),
    ("uuid", "uuid", _str),
    ("name", "name", _str),
    ("pci.bus_id", "pci_bus_id", _str),
    ("memory.total", "memory_total_mib", _int),
    ("memory.used", "memory_used_mib", _int),
    ("memory.free", "memory_free_mib", _int),
    ("utilization.gpu", "utilization_gpu_pct", _int),
    ("utilization.memory", "utilization_memory_pct", _int),
    ("temperature.gpu", "temperature_c", _int),
    ("power.draw", "power_draw_w", _float),
    ("power.limit", "power_limit_w", _float),
    ("persistence_mode", "persistence_mode", _enabled),
    ("mig.mode.current", "mig_mode", _enabled),
    ("ecc.mode.current", "ecc_mode", _enabled),
    ("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected_volatile", _int),
    ("pstate", "performance_state", _str),
    ("driver_version", "driver_version", _str),
)


def gpu_command(smi: str) -> t.List[str]:
    return [smi, "--query-gpu=" + ",".join(field for field, dummy, dummy2 in GPU_FIELDS), "--format=csv,noheader,nounits"]


def apps_command(smi: str) -> t.List[str]:
    return [smi, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]


def _value(word: str, convert: t.Callable[[str], t.Any]) -> t.Any:
    """None for nvidia-smi's placeholders: [N/A], [Not Supported], N/A, [Unknown Error] ..."""
    word = word.strip()
    if not word or word.startswith("[") or word == "N/A":
        return None
    try:
        return convert(word)
    except ValueError:
        return None


def parse_gpus(output: str) -> t.Tuple[t.List[t.Dict[str, t.Any]], t.List[str]]:
    """Rows of the --query-gpu CSV as dicts keyed like gpu_facts, and the lines that are not rows."""
    rows: t.List[t.Dict[str, t.Any]] = []
    other: t.List[str] = []
    for line in output.splitlines():
        words = line.split(",")
        if len(words) != len(GPU_FIELDS) or not words[0].strip().isdigit():
            if line.strip():
                other.append(line.strip())
            continue
        rows.append({key: _value(word, convert) for (dummy, key, convert), word in zip(GPU_FIELDS, words)})
    return rows, other


def parse_apps(output: str) -> t.List[t.Tuple[str, Holder]]:
    """(GPU UUID, holder) for each row of the --query-compute-apps CSV."""
    holders: t.List[t.Tuple[str, Holder]] = []
    for line in output.splitlines():
        words = [word.strip() for word in line.split(",")]
        if len(words) != 3 or not words[1].isdigit():
            continue
        holders.append((words[0], Holder(int(words[1]), _value(words[2], _int), "compute")))
    return holders
