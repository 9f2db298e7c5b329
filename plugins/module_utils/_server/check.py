# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""After a launch: is the new server really the one holding its GPUs, with its workers and its environment?

A fresh NVML reading joined with the server's process tree, so the answer does not rest on the
launch having "worked" or on /health alone: a leftover of an earlier server would answer neither.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession, open_nvml
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import is_secret_name
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import same_process, string_env


class Check(t.NamedTuple):
    name: str
    ok: bool
    detail: str


def _tree(psutil: t.Any, proc: t.Any) -> t.Dict[int, str]:
    """pid -> name of the server and every descendant."""
    members = [proc]
    try:
        members += proc.children(recursive=True)
    except psutil.Error:
        pass
    tree = {}
    for member in members:
        try:
            tree[member.pid] = member.name()
        except psutil.Error:
            continue
    return tree


def _name(psutil: t.Any, pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "not visible here"


def _environment_check(psutil: t.Any, proc: t.Any, expected: t.Mapping[str, str], secret_env: t.Sequence[str] = ()) -> Check:
    """Compare every value; show a secret's name only (as configured, not set, or different), never its value."""
    try:
        actual = proc.environ()
    except psutil.Error as exc:
        return Check("environment", False, "cannot read the environment of PID %d: %s" % (proc.pid, exc))
    wrong = []
    shown = []
    for key in sorted(expected):
        secret = is_secret_name(key, secret_env)
        if key not in actual:
            wrong.append("%s is not set (expected %s)" % (key, "a secret value" if secret else repr(expected[key])))
        elif actual[key] != str(expected[key]):
            wrong.append("%s differs from its configured secret value" % key if secret
                         else "%s=%r (expected %r)" % (key, actual[key], expected[key]))
        shown.append("%s (secret, as configured)" % key if secret else "%s=%s" % (key, expected[key]))
    if wrong:
        return Check("environment", False, "PID %d runs with " % proc.pid + "; ".join(wrong))
    return Check("environment", True, "PID %d runs with %s" % (proc.pid, ", ".join(shown) or "nothing to check"))


def check_launch(session: NvmlSession, psutil: t.Any, proc: t.Any, gpus: t.Sequence[int], tensor_parallel_size: int,
                 expected_env: t.Mapping[str, str],
                 secret_env: t.Sequence[str] = ()) -> t.Tuple[t.List[Check], t.List[t.Dict[str, t.Any]]]:
    """The checks, in order, and the server's GPU-holding processes (pid, name, gpus, used_memory_mib)."""
    tree = _tree(psutil, proc)
    workers: t.Dict[int, t.Dict[str, t.Any]] = {}
    strangers: t.List[str] = []
    unheld: t.List[int] = []
    unreadable: t.List[str] = []
    wandered: t.List[str] = []
    selected = set(gpus)
    for index in range(session.count):
        try:
            holders = session.holders(index)
        except NvmlError as exc:
            if index in selected:
                unreadable.append("GPU %d: %s" % (index, exc))
            continue
        mine = [holder for holder in holders if holder.pid in tree]
        for holder in mine:
            entry = workers.setdefault(holder.pid, {"pid": holder.pid, "name": tree[holder.pid], "gpus": [], "used_memory_mib": 0})
            entry["gpus"].append(index)
            entry["used_memory_mib"] = (entry["used_memory_mib"] or 0) + (holder.used_memory_mib or 0)
            if index not in selected:
                wandered.append("%s (PID %d) on GPU %d" % (tree[holder.pid], holder.pid, index))
        if index in selected:
            if not mine:
                unheld.append(index)
            strangers += ["GPU %d: %s (PID %d)" % (index, _name(psutil, holder.pid), holder.pid)
                          for holder in holders if holder.pid not in tree]
    checks = []
    if unreadable:
        checks.append(Check("gpus_readable", False, "; ".join(unreadable)))
    held = sorted(selected - set(unheld))
    checks.append(Check(
        "gpus_held_by_server", not unheld,
        "every GPU of the server (%s) is held by its own process tree" % _indices(gpus) if not unheld
        else "no process of the server (PID %d) holds GPU %s" % (proc.pid, _indices(unheld)) + (
            "; held: %s" % _indices(held) if held else "")))
    checks.append(Check(
        "no_other_holders", not strangers,
        "no other process holds the server's GPUs" if not strangers
        else "processes outside the server's tree hold its GPUs: " + "; ".join(strangers)))
    checks.append(Check(
        "stays_on_its_gpus", not wandered,
        "the server holds no GPU outside %s" % _indices(gpus) if not wandered
        else "the server's processes hold GPUs it was not given: " + "; ".join(wandered)))
    count = len(workers)
    checks.append(Check(
        "worker_count", count == tensor_parallel_size,
        "%d GPU-holding process(es) in the server's tree, tensor-parallel size %d" % (count, tensor_parallel_size)))
    checks.append(_environment_check(psutil, proc, expected_env, secret_env))
    ordered = [workers[pid] for pid in sorted(workers, key=lambda pid: (workers[pid]["gpus"], pid))]
    return checks, ordered


def run_launch_check(pynvml: t.Any, psutil: t.Any, pid: int, create_time: t.Optional[float], gpus: t.Sequence[int],
                     tensor_parallel_size: int, env: t.Mapping[str, t.Any], secret_env: t.Sequence[str] = ()) -> t.Dict[str, t.Any]:
    """The whole launch check of the server ``pid`` (the same process when ``create_time`` is given), in an NVML session
    of its own: ok, checks (server_running first), workers and a one-line msg."""
    try:
        proc = psutil.Process(pid) if create_time is None else same_process(psutil, pid, create_time)
    except psutil.Error:
        proc = None
    if proc is None:
        entry = {"name": "server_running", "ok": False, "detail": "the server process %d is not running" % pid}
        return {"ok": False, "checks": [entry], "workers": [], "msg": entry["detail"]}
    wanted_env = string_env(env)
    try:
        with open_nvml(pynvml) as session:
            checks, workers = check_launch(session, psutil, proc, gpus, tensor_parallel_size, wanted_env, secret_env)
    except NvmlError as exc:
        return {"ok": False, "checks": [], "workers": [], "msg": str(exc)}
    entries = [{"name": "server_running", "ok": True, "detail": "PID %d runs" % proc.pid}] + [c._asdict() for c in checks]
    failed = [entry for entry in entries if not entry["ok"]]
    if failed:
        msg = "the new server is not the one it should be: " + "; ".join(entry["detail"] for entry in failed)
    else:
        msg = "PID %d: %d worker(s) of its own hold GPU %s" % (proc.pid, len(workers), ", ".join(map(str, gpus)))
    return {"ok": not failed, "checks": entries, "workers": workers, "msg": msg}


def _indices(indices: t.Iterable[int]) -> str:
    return ", ".join(str(index) for index in indices)
