# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The server that listens on the role's port, whoever started it: what it is, how it was started, whether the role
may take it over.

The process listening on ``vllm_server_port`` is the server the inventory describes. The role takes it over (drains it,
stops its whole tree, launches its own) when it looks like vLLM and nothing would start it again: started by hand in
tmux, screen or a shell, nohup'd, or by any other live parent, and a docker or podman container (stopped through its
runtime, never signalled: its restart policy would start it again). It refuses, before stopping anything, a listener that
is not vLLM (nginx, say), one of another tool's systemd unit (killing it makes the unit start it again), a Kubernetes
pod's container (the kubelet owns it) and a container whose runtime does not answer.

Package rule (_reclaim): whose a process is, like owner.py for a GPU holder. It imports the flat files of module_utils,
_host and its own files.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._vllm_flags import head_address, head_port, node_count, runs_on_ray, spans_hosts
from ansible_collections.gpuops.fleet.plugins.module_utils._host import listener as _listener
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import KUBERNETES, container_of, is_port_publisher, starts_again
from ansible_collections.gpuops.fleet.plugins.module_utils._host.procfs import PROC
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.containers import Runtimes
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import DEFAULT_SUBREAPERS, matches_any, regexes

# the role's vllm_server_reclaim_match, what a vLLM server looks like: _host/listener.py's
DEFAULT_MATCH = _listener.DEFAULT_MATCH

Looks = t.Callable[[str, t.Sequence[str]], bool]


def read_listener(psutil: t.Any, port: int, match: t.Sequence[str] = tuple(DEFAULT_MATCH), unit: t.Optional[str] = None,
                  stop_units: bool = False, across: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Optional[t.Dict[str, t.Any]]:
    """describe() with ``match`` as regular expressions (the option of vllm_listener and of vllm_lock's status); raises
    SpecError naming ``match`` for a pattern that does not compile, ListenerError as describe() does."""
    patterns = regexes("match", match)
    adopters = regexes("subreapers", DEFAULT_SUBREAPERS)
    return describe(psutil, port, lambda name, cmdline: matches_any(patterns, name, cmdline),
                    lambda name, cmdline: matches_any(adopters, name, cmdline), unit, stop_units, across=across)


def find_rank(psutil: t.Any, head: str, port: t.Optional[int], is_vllm: Looks) -> t.Optional[int]:
    """The headless rank of a server across hosts that runs on this host joined to ``head`` on ``port`` (its
    --master-addr and --master-port, or --data-parallel-address and --data-parallel-rpc-port): a vLLM-shaped process with
    --headless whose parent is not one too. None when there is no such process, or more than one (then none is taken
    over: the preflight names what holds the GPUs)."""
    found: t.Dict[int, int] = {}
    for proc in psutil.process_iter(["ppid", "name", "cmdline"]):
        info = proc.info
        cmdline = [str(word) for word in info.get("cmdline") or []]
        if ("--headless" in cmdline and head_address(cmdline) == head and head_port(cmdline) == port
                and is_vllm(info.get("name") or "", cmdline)):
            found[proc.pid] = info.get("ppid") or 0
    tops = [pid for pid, parent in found.items() if parent not in found]
    return tops[0] if len(tops) == 1 else None


def _process(psutil: t.Any, pid: int) -> t.Optional[t.Tuple[str, t.List[str], float, t.List[int]]]:
    """(name, command line, start time, its descendants' PIDs) of a live process; None when it is gone or unreadable."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            name, cmdline, create_time = proc.name(), proc.cmdline(), proc.create_time()
        return name, cmdline, create_time, [child.pid for child in proc.children(recursive=True)]
    except psutil.Error:
        return None


def _container(psutil: t.Any, runtimes: Runtimes, pid: int, seen: t.Tuple[str, t.List[str], float, t.List[int]], port: int,
               is_vllm: Looks, proc_root: str) -> t.Optional[t.Tuple[t.Dict[str, t.Any], t.Tuple[int, str, t.List[str], float, t.List[int]]]]:
    """The listener's container and the container's server: (``{runtime, id, name, image, restart_policy, starts_again,
    error, port_held_by}`` (``pod_uid`` for Kubernetes), (PID, name, command line, start time, descendants) of the process
    to take over). The listener is in the container (the host's network), or it is the runtime's process that holds the
    container's published port (then the server is the container's main process, or the first vLLM-shaped process of its
    tree). None when the listener is neither."""
    name, cmdline = seen[0], seen[1]
    ref = container_of(pid, proc_root)
    held_by = None
    if ref is None:
        ref = runtimes.publisher(name, cmdline, port)
        if ref is None:
            return None
        held_by = {"pid": pid, "name": name}
    state, error = runtimes.inspect(ref.runtime, ref.container_id) if ref.runtime != KUBERNETES else (None, None)
    box: t.Dict[str, t.Any] = {
        "runtime": ref.runtime, "id": ref.container_id, "name": state.name if state else None, "image": state.image if state else None,
        "restart_policy": state.restart_policy if state else None, "error": error, "port_held_by": held_by,
        "starts_again": starts_again(ref.runtime, state.restart_policy) if state else None,
    }
    if ref.runtime == KUBERNETES:
        box["pod_uid"] = ref.pod_uid
    server = (pid,) + seen
    if held_by is not None and state is not None and state.pid:
        server = _served_in(psutil, state.pid, is_vllm) or server
    return box, t.cast(t.Tuple[int, str, t.List[str], float, t.List[int]], server)


def _served_in(psutil: t.Any, main_pid: int, is_vllm: Looks) -> t.Optional[t.Tuple[int, str, t.List[str], float, t.List[int]]]:
    """The process that serves in a container whose main process is ``main_pid``: that process, or the first vLLM-shaped
    process of its tree when it is not one itself (a shell, an init); None when it is gone."""
    main = _process(psutil, main_pid)
    if main is None:
        return None
    if not is_vllm(main[0], main[1]):
        for child in main[3]:
            found = _process(psutil, child)
            if found is not None and is_vllm(found[0], found[1]):
                return (child,) + found
    return (main_pid,) + main


def served_behind(psutil: t.Any, runtimes: t.Optional[Runtimes] = None,
                  match: t.Sequence[str] = tuple(DEFAULT_MATCH)) -> t.Callable[[int, str, t.List[str]], t.Optional[int]]:
    """For _host.secured: (port, name, command line) of the process that listens on ``port`` -> the PID of the process
    that serves in the container whose published port it holds, picked as the takeover picks it; None when it holds no
    container's port (it is no runtime's port publisher). Raises ListenerError for a publisher whose container its
    runtime does not name, whose runtime cannot be asked, or that runs nothing."""
    asked = runtimes or Runtimes()
    patterns = regexes("match", match)

    def behind(port: int, name: str, cmdline: t.List[str]) -> t.Optional[int]:
        if not is_port_publisher(name, cmdline):
            return None
        what = "port %d is held by %s, a container runtime's process that publishes it for a container" % (port, name)
        ref = asked.publisher(name, cmdline, port)
        if ref is None:
            raise _listener.ListenerError("%s that its runtime does not name" % what)
        state, error = asked.inspect(ref.runtime, ref.container_id)
        if state is None or not state.pid:
            raise _listener.ListenerError("%s (%s %s) %s" % (what, ref.runtime, ref.container_id[:12], error or "that runs nothing"))
        found = _served_in(psutil, state.pid, lambda program, argv: matches_any(patterns, program, argv))
        if found is None:
            raise _listener.ListenerError("%s (%s %s) whose main process (PID %d) ended while it was read" % (
                what, ref.runtime, ref.container_id[:12], state.pid))
        return found[0]
    return behind


def container_words(box: t.Mapping[str, t.Any]) -> str:
    """``the podman container NAME (image IMAGE, id SHORT)``, for a container as _container() describes it."""
    if box["runtime"] == KUBERNETES:
        return "the Kubernetes container %s of pod %s" % (box["id"][:12], box.get("pod_uid") or "(unknown)")
    said = ["image %s" % box["image"]] if box.get("image") else []
    return "the %s container %s (%s)" % (box["runtime"], box.get("name") or box["id"][:12], ", ".join(said + ["id %s" % box["id"][:12]]))


def describe(psutil: t.Any, port: int, is_vllm: Looks, adopts: Looks, own_unit: t.Optional[str] = None,  # pylint: disable=too-many-arguments
             stop_units: bool = False, proc_root: str = PROC, runtimes: t.Optional[Runtimes] = None,
             across: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Optional[t.Dict[str, t.Any]]:
    """The listener on ``port`` as the role shows it (its command line masked), None when nothing listens.

    ``is_vllm``: whether a process (name, command line) is a vLLM server; ``adopts``: whether a parent adopts orphans;
    ``runtimes``: how a container's runtime is asked. A server in a container is described by the
    process that serves in it (``pid``), even when the runtime's process holds its published port
    (``container.port_held_by``). Raises ListenerError when unrelated processes share the port.

    ``across``: this host's node of a server across hosts (``group``, its name; ``size``, its hosts; on a headless node
    ``head`` and ``port``, where its ranks join the head): there the server to take over is the headless rank joined to
    that head (find_rank),
    not a listener; and a rank of a server across as many hosts as the group is taken over, not refused."""
    head = (across or {}).get("head")
    pid = find_rank(psutil, head, (across or {}).get("port"), is_vllm) if head else _listener.listening_pid(psutil, port)
    if pid is None:
        return None
    seen = _process(psutil, pid)
    if seen is None:
        # gone since the socket table was read (or unreadable): nothing to take over; a launch on the port then names it
        return None
    found = _container(psutil, runtimes or Runtimes(), pid, seen, port, is_vllm, proc_root)
    box = found[0] if found else None
    if found:
        pid, name, cmdline, create_time, tree = found[1]
        started = _listener.Started(_listener.CONTAINER, "in %s" % container_words(found[0]) + (
            ", its port held by %s PID %d" % (found[0]["port_held_by"]["name"], found[0]["port_held_by"]["pid"]) if found[0]["port_held_by"] else ""))
    else:
        name, cmdline, create_time, tree = seen
        started = _listener.how_started(pid, own_unit, lambda p: adopts(p.name, p.cmdline), proc_root)
    vllm = is_vllm(name, cmdline)
    shown = " ".join(masked_argv(cmdline)) or name
    info = {
        "pid": pid,
        "create_time": create_time,
        "name": name,
        "cmdline": masked_argv(cmdline),
        "command": shown,
        "vllm": vllm,
        "tree": sorted(tree),
        "how": started.how,
        "started": started.words,
        "unit": started.unit,
        "container": box,
        "by": started.by,
    }
    info["refusal"] = refusal(info, port, stop_units, across)
    info["takeover"] = info["refusal"] is None and started.how != _listener.OWN_UNIT
    return info


def _across_refusal(cmdline: t.Sequence[str], ranks: str, held: str, who: str, across: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[str]:
    """A rank of a server across hosts is taken over only by a run over its whole server group: as many hosts."""
    size = int((across or {}).get("size") or 1)
    if size <= 1:
        return ("%s the vLLM server %s, one rank of a server across hosts (%s): stopping it here would leave its other "
                "ranks holding their GPUs on the other hosts; stop it on every one of its nodes, then rerun, or name its "
                "hosts as a server group (vllm_server_nodes_group)" % (held, who, ranks))
    count = node_count(cmdline)
    if count == size:
        return None
    return ("%s the vLLM server %s, one rank of %s (%s), but vllm_server_nodes_group=%s holds %d hosts: taking it over would "
            "leave the ranks on other hosts holding their GPUs; stop it on every one of its nodes, then rerun"
            % (held, who, "a server across %d hosts" % count if count else "a server across hosts", ranks, across.get("group"), size))


def refusal(info: t.Mapping[str, t.Any], port: int, stop_units: bool = False,
            across: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Optional[str]:
    """Why the role may not stop this listener (or headless rank, see describe), in words naming it and the way out; None
    when it may. ``stop_units``: the role may stop and disable another tool's systemd unit that runs it
    (vllm_server_takeover_units)."""
    who = "PID %d (%s), started %s" % (info["pid"], info["command"][:200], info["started"])
    head = (across or {}).get("head")
    held = "this host runs, as a headless rank joined to %s," % head if head else "port %d is held by" % port
    if not info["vllm"]:
        return "port %d is held by %s, which is not a vLLM server: it is not stopped; stop it or choose another vllm_server_port" % (
            port, who)
    if runs_on_ray(info.get("cmdline") or []):
        return ("%s the vLLM server %s, which runs on a Ray cluster (--distributed-executor-backend ray): "
                "the role never signals Ray's processes (its raylet and workers, on this host and others), so it can "
                "neither stop that server whole nor prove its GPUs free; stop it through Ray (end the job that started it, "
                "or ray stop on each of its nodes), then rerun; across hosts, serve without Ray (vLLM's own multiprocessing "
                "backend, --distributed-executor-backend mp)" % (held, who))
    cmdline = info.get("cmdline") or []
    ranks = spans_hosts(cmdline)
    if ranks:
        refused = _across_refusal(cmdline, ranks, held, who, across)
        if refused:
            return refused
    box = info.get("container") or {}
    if info["how"] == _listener.CONTAINER and box.get("runtime") == KUBERNETES:
        return ("%s the vLLM server %s: the kubelet runs this pod and starts what it runs again; change "
                "its deployment (kubectl), then rerun" % (held, who))
    if info["how"] == _listener.CONTAINER and box.get("error"):
        return ("%s the vLLM server %s, and its runtime could not be asked about it (%s): stop the container "
                "yourself and rerun" % (held, who, box["error"]))
    if info["how"] == _listener.UNIT and not stop_units:
        return ("%s the vLLM server %s, which would start it again when it ends: set "
                "vllm_server_takeover_units=true to let this run stop and disable %s, or stop and disable it yourself "
                "(systemctl disable --now %s), and rerun" % (held, who, info["unit"], info["unit"]))
    return None
