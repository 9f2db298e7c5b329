# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The container a host process belongs to, read from its /proc/PID/cgroup, and the container runtimes' own processes.

A runtime puts each container's processes in a cgroup named after the container's id (64 hex digits), which every
process of the container keeps, whatever it runs and whatever PID it has inside:

- docker: ``/system.slice/docker-ID.scope`` (systemd cgroup driver), ``/docker/ID`` (cgroupfs driver, cgroup v1 or v2);
- podman: ``/machine.slice/libpod-ID.scope`` (rootful, systemd), ``.../user@UID.service/user.slice/libpod-ID.scope``
  (rootless), ``/libpod_parent/libpod-ID`` (cgroupfs), a sub-cgroup such as ``libpod-ID.scope/container`` included.
  ``libpod-conmon-ID.scope`` (and cgroupfs' ``/libpod_parent/conmon``) is podman's container monitor, not the container;
- Kubernetes (containerd, CRI-O, or docker through cri-dockerd) below a ``kubepods`` cgroup, one cgroup per pod
  (``kubepods-burstable-podUID.slice`` with the UID's dashes written as underscores, or ``/kubepods/besteffort/podUID``;
  a guaranteed pod sits right below kubepods) and one per container below it (``cri-containerd-ID.scope``,
  ``crio-ID.scope``, ``docker-ID.scope``, or the bare ``ID`` with the cgroupfs driver). ``crio-conmon-ID.scope`` is
  CRI-O's container monitor, not the container. A ``cri-containerd-ID.scope`` or ``crio-ID.scope`` elsewhere is a
  Kubernetes container too (only the CRI names cgroups so), with no pod UID when no pod's cgroup is above it.

The cgroup paths read are the ones /proc shows this process: the host's, when this process runs in the host's cgroup
namespace. The first container found from the root wins (the container that the host's runtime knows, when one runs
inside another). PIDs are never translated: the PID asked about is the one NVML reports, the host's.

The runtimes' command line has one client here, RuntimeClient: it finds a runtime's command once (``docker``,
``podman``; None when it is not installed), runs a command with a timeout (run_cli: None when it did not end in time or
could not be started) and reads ``inspect``'s answer, podman's and docker's JSON alike, into one ContainerState that
carries every field its callers read (gpu_facts' holders, gpu_reclaim's containers, the report, the role's container
launch mode).

A container's name and image are asked of its runtime's command line (``docker inspect``, ``podman inspect``): once per
container per ContainerReader, within INSPECT_TIMEOUT_S; after one that does not answer in time, that runtime is not asked
again by the same reader. A command that is missing, fails, times out or answers something else leaves both None. A
Kubernetes container's name and image are not asked (the kubelet's API knows them; the pod UID names the pod).
Rootless podman's containers are known only to their user's podman: asked as another user, podman does not know them.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host import procfs
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import program_names

DOCKER = "docker"
PODMAN = "podman"
KUBERNETES = "kubernetes"
INSPECT_TIMEOUT_S = 5.0

# a runtime's command line, and the arguments before the container's id that make it print the container as JSON
_INSPECT = {
    DOCKER: ("docker", ["inspect", "--type", "container"]),
    PODMAN: ("podman", ["inspect", "--type", "container", "--format", "json"]),
}

_ID = r"([0-9a-f]{64})"
_BARE_ID = re.compile(r"^%s$" % _ID)
# docker-ID.scope (docker's systemd driver, or cri-dockerd's below kubepods), cri-containerd-ID.scope and crio-ID.scope
# (Kubernetes' runtimes; CRI-O's cgroupfs driver writes crio-ID); crio-conmon-ID.scope does not match
_SCOPE = re.compile(r"^(docker|cri-containerd|crio)-%s(?:\.scope)?$" % _ID)
_ENGINES = {"cri-containerd": "containerd", "crio": "crio", DOCKER: DOCKER}
# libpod-conmon-ID.scope does not match: "conmon-" is no hex digit
_LIBPOD = re.compile(r"^libpod-%s(?:\.scope)?$" % _ID)
_KUBEPODS = "kubepods"
# a pod's cgroup: kubepods-[QOS-]podUID.slice (systemd driver, dashes as underscores), podUID (cgroupfs); a static pod's
# UID is 32 hex digits without dashes
_POD = re.compile(r"^(?:\S*-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?$")

# The runtimes' own processes, by program (see is_runtime_process): the CLIs (podman, docker), the container monitors
# (conmon, conmonrs), the OCI runtimes (runc, with runc:[N:STAGE] while it sets a container up, crun), the daemons and
# their shims (containerd, containerd-shim-runc-v2, dockerd, docker-proxy, crio) and the inits they put in containers
# (catatonit; podman-init and docker-init: catatonit and tini as `run --init` mounts them in a container).
RUNTIME_PROGRAMS = re.compile(
    r"^(podman|docker|conmon|conmonrs|runc|runc:\[\d:\w+\]|crun|containerd|containerd-shim\S*|dockerd|docker-proxy|crio"
    r"|catatonit|podman-init|docker-init)$")


# the runtime processes that hold a container's published port (-p) on the host: podman's container monitor (rootful
# podman), docker's userland proxy, rootless podman's port forwarder
PORT_PUBLISHERS = ("conmon", "docker-proxy", "rootlessport", "rootlessport-child")


class ContainerRef(t.NamedTuple):
    """A container as a cgroup path names it. ``engine``: the runtime that named the cgroup (docker, podman,
    containerd, crio; "" for a Kubernetes container whose cgroup is its bare id)."""

    runtime: str  # DOCKER, PODMAN or KUBERNETES
    container_id: str  # the full id, 64 hex digits
    pod_uid: t.Optional[str] = None  # KUBERNETES only: the pod's UID, with its dashes (None: the path names no pod)
    engine: str = ""


class CliAnswer(t.NamedTuple):
    """What a command said: ``rc`` None when it did not end within its time (or could not be started); ``err`` its
    standard error."""

    rc: t.Optional[int]
    out: str
    timed_out: bool = False
    err: str = ""


class ContainerState(t.NamedTuple):
    """A container as its runtime's ``inspect`` shows it (podman's and docker's JSON alike); each field None when the
    answer lacks it or it has the wrong type.

    ``pid``: its main process, by the host's PID (0 or None once it is stopped); ``restart_policy``:
    HostConfig.RestartPolicy.Name (``no`` when the runtime writes none: podman's default); ``status``: State.Status
    (running, exited, ...); ``exit_code``: State.ExitCode; ``conmon_pid``: podman's container monitor (State.ConmonPid,
    None for docker or 0); ``labels``: Config.Labels (empty when it has none)."""

    name: t.Optional[str]
    image: t.Optional[str]
    running: t.Optional[bool]
    pid: t.Optional[int]
    restart_policy: t.Optional[str]
    restart_count: t.Optional[int]
    id: t.Optional[str] = None
    status: t.Optional[str] = None
    exit_code: t.Optional[int] = None
    conmon_pid: t.Optional[int] = None
    labels: t.Mapping[str, str] = {}


class Inspected(t.NamedTuple):
    """RuntimeClient.inspect's answer: the container (None when the command is missing, failed, timed out or answered
    no such container) and the command's own answer (None when the runtime's command is not installed)."""

    state: t.Optional[ContainerState]
    answer: t.Optional[CliAnswer]


RunCli = t.Callable[[t.Sequence[str], t.Optional[float]], CliAnswer]
FindCli = t.Callable[[str], t.Optional[str]]


def container_in_path(path: str) -> t.Optional[ContainerRef]:
    """The container a cgroup path names (see the module doc), the first from the root; None for any other cgroup (a
    systemd service, a user's session, a runtime's monitor, a pod's own cgroup)."""
    parts = [part for part in path.split("/") if part]
    kubepods = False
    pod_uid: t.Optional[str] = None
    for index, part in enumerate(parts):
        kubepods = kubepods or _KUBEPODS in part
        pod = _POD.match(part) if kubepods else None
        if pod:
            pod_uid = pod.group(1).replace("_", "-")
            continue
        found = _SCOPE.match(part)
        if found and (kubepods or found.group(1) != DOCKER):
            return ContainerRef(KUBERNETES, found.group(2), pod_uid, _ENGINES[found.group(1)])
        if found:
            return ContainerRef(DOCKER, found.group(2), engine=DOCKER)
        if kubepods:
            if pod_uid and _BARE_ID.match(part):  # the cgroupfs driver: /kubepods/QOS/podUID/ID
                return ContainerRef(KUBERNETES, part, pod_uid)
            continue
        if part == DOCKER and index + 1 < len(parts) and _BARE_ID.match(parts[index + 1]):
            return ContainerRef(DOCKER, parts[index + 1], engine=DOCKER)
        found = _LIBPOD.match(part)
        if found:
            return ContainerRef(PODMAN, found.group(1), engine=PODMAN)
    return None


def container_of(pid: int, proc: str = procfs.PROC) -> t.Optional[ContainerRef]:
    """The container of host process ``pid``, from its /proc/PID/cgroup (each path in procfs.cgroup_paths' order); None
    when it is in none, or its cgroups cannot be read."""
    for path in procfs.cgroup_paths(pid, proc) or []:
        found = container_in_path(path)
        if found:
            return found
    return None


def is_runtime_process(name: t.Optional[str], cmdline: t.Optional[t.Sequence[str]]) -> bool:
    """True for a container runtime's own process, by program (its name, or the base name of its first command-line
    word; never its arguments): never to be signalled.

    Ending one does not free a GPU and breaks what the runtime manages: a daemon, a shim or a container's monitor ends
    or orphans its containers, and a CLI started in the foreground (``docker run``, ``podman run``) passes a signal on
    to its container. catatonit (podman-init) and docker-init are a container's init (PID 1 inside it, ``--init``; catatonit is also
    the pause process of a podman pod, and rootless podman's that keeps its user's namespaces): they hold no GPU
    themselves, and ending one ends its whole container (which a restart policy starts again) or, for rootless podman's,
    every container of that user. The GPU holder below such an init is an ordinary process."""
    return any(RUNTIME_PROGRAMS.match(program) for program in program_names(name, cmdline))


def is_port_publisher(name: t.Optional[str], cmdline: t.Optional[t.Sequence[str]]) -> bool:
    """True for a runtime's process that holds a container's published port on the host (PORT_PUBLISHERS), by program."""
    return bool(set(program_names(name, cmdline)) & set(PORT_PUBLISHERS))


def is_full_id(text: str) -> bool:
    """Whether ``text`` is a container's full id (64 lowercase hex digits)."""
    return bool(_BARE_ID.match(text))


def conmon_container_id(cmdline: t.Sequence[str]) -> t.Optional[str]:
    """The id of the container a conmon monitors: its ``-c ID``, ``--cid ID`` or ``--cid=ID`` (64 hex digits); None
    when its command line has none."""
    words = list(cmdline)
    for index, word in enumerate(words):
        value = words[index + 1] if word in ("-c", "--cid") and index + 1 < len(words) else word[6:] if word.startswith("--cid=") else None
        if value is not None and _BARE_ID.match(value):
            return value
    return None


def publishing_argv(cli: str, port: int) -> t.List[str]:
    """docker's command that prints the full id of each container that publishes ``port`` on the host, one per line."""
    return [cli, "ps", "--quiet", "--no-trunc", "--filter", "publish=%d" % port]


def starts_again(runtime: str, policy: t.Optional[str]) -> t.Optional[str]:
    """When the runtime starts a container it stopped again by itself, given its restart policy; None when it does not.

    docker: ``always`` when dockerd starts (a daemon restart, a reboot); ``unless-stopped`` and ``on-failure`` keep a
    stopped container stopped. podman: ``podman-restart.service``, where it is enabled, starts the containers whose
    policy is ``always`` at boot (podman's documentation calls ``unless-stopped`` identical to it)."""
    if runtime == DOCKER and policy == "always":
        return "dockerd starts it again when it starts (a daemon restart, a reboot): its restart policy is always"
    if runtime == PODMAN and policy in ("always", "unless-stopped"):
        return ("podman-restart.service, where it is enabled, starts it again at boot: its restart policy is %s (podman documents "
                "unless-stopped as identical to always)" % policy)
    return None


def run_cli(argv: t.Sequence[str], timeout: t.Optional[float]) -> CliAnswer:
    """Run ``argv`` (no shell, no input), wait at most ``timeout`` seconds (then it is killed; None: until it ends): its
    exit code and output."""
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return CliAnswer(None, "", timed_out=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return CliAnswer(None, "", err=str(exc))
    return CliAnswer(done.returncode, done.stdout.decode("utf-8", "replace"), err=done.stderr.decode("utf-8", "replace"))


def failure(answer: CliAnswer, timeout: t.Optional[float]) -> str:
    """Why ``answer`` is no good, in words: no answer in time, could not be run, its exit code and last line of error."""
    if answer.timed_out:
        return "no answer within %g s" % (timeout or 0)
    if answer.rc is None:
        return "could not be run%s" % (": " + answer.err.strip() if answer.err.strip() else "")
    text = (answer.err.strip() or answer.out.strip()).splitlines()
    return "exited %d%s" % (answer.rc, ": " + text[-1][:300] if text else "") if answer.rc != 0 else "an answer that is not this container"


def inspect_argv(runtime: str, cli: str, container: str) -> t.List[str]:
    """The command that prints the container ``container`` (its id or name) as JSON (docker's or podman's ``inspect``),
    by ``cli``."""
    return [cli] + _INSPECT[runtime][1] + [container]


def _field(item: t.Mapping[str, t.Any], *keys: str) -> t.Any:
    """item[keys[0]][keys[1]]..., None where a level is missing or not a dictionary."""
    value: t.Any = item
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _int(value: t.Any) -> t.Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: t.Any) -> t.Optional[str]:
    return value if isinstance(value, str) else None


def _one_item(text: str, container_id: t.Optional[str]) -> t.Optional[t.Dict[str, t.Any]]:
    """The one object of an ``inspect`` answer (a JSON list of one object, whose ``Id`` is ``container_id`` when it is
    given); None for anything else."""
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
        return None
    if container_id is not None and found[0].get("Id") != container_id:
        return None
    return found[0]


def _restart_policy(item: t.Mapping[str, t.Any]) -> t.Optional[str]:
    policy = _field(item, "HostConfig", "RestartPolicy", "Name")
    if policy is None and isinstance(_field(item, "HostConfig", "RestartPolicy"), dict):
        policy = ""
    return (policy or "no") if isinstance(policy, str) else None


def parse_container(text: str, container_id: t.Optional[str] = None) -> t.Optional[ContainerState]:
    """The container from ``docker inspect`` or ``podman inspect`` output (a JSON list of one object, whose ``Id`` is
    ``container_id`` when it is given: a container asked by name has no id to check); None for anything else. A field of
    the wrong type is None."""
    item = _one_item(text, container_id)
    if item is None:
        return None
    name = item.get("Name")
    image = item.get("ImageName") or _field(item, "Config", "Image")  # podman's ImageName; docker's Config.Image
    running = _field(item, "State", "Running")
    labels = _field(item, "Config", "Labels")
    return ContainerState(
        name=(name.lstrip("/") or None) if isinstance(name, str) else None,  # docker's Name starts with a slash
        image=image if isinstance(image, str) and image else None,
        running=running if isinstance(running, bool) else None,
        pid=_int(_field(item, "State", "Pid")),
        restart_policy=_restart_policy(item),
        restart_count=_int(item.get("RestartCount")),
        id=_text(item.get("Id")),
        status=_text(_field(item, "State", "Status")),
        exit_code=_int(_field(item, "State", "ExitCode")),
        conmon_pid=_int(_field(item, "State", "ConmonPid")) or None,
        labels=dict(labels) if isinstance(labels, dict) else {},
    )


class RuntimeClient:
    """The container runtimes' command line (docker, podman): each runtime's command found once (``find``: the PATH's
    by default, or a module's get_bin_path), each command run by ``run`` (run_cli by default) within its timeout."""

    def __init__(self, find: t.Optional[FindCli] = None, run: t.Optional[RunCli] = None) -> None:
        self._find = find or shutil.which
        self._run = run or run_cli
        self._clis: t.Dict[str, t.Optional[str]] = {}

    def cli(self, runtime: str) -> t.Optional[str]:
        """The path of the runtime's command (docker, podman); None when it is not installed, or for another runtime."""
        if runtime not in _INSPECT:
            return None
        if runtime not in self._clis:
            self._clis[runtime] = self._find(_INSPECT[runtime][0])
        return self._clis[runtime]

    def forget(self, runtime: str) -> None:
        """Take the runtime's command for missing from now on (one that did not answer in time, say)."""
        self._clis[runtime] = None

    def run(self, argv: t.Sequence[str], timeout: t.Optional[float]) -> CliAnswer:
        """Run ``argv`` within ``timeout`` seconds (None: until it ends)."""
        return self._run(argv, timeout)

    def inspect(self, runtime: str, container: str, timeout: t.Optional[float] = INSPECT_TIMEOUT_S) -> Inspected:
        """The container ``container`` (its full id, checked against the answer's, or its name) as its runtime's
        ``inspect`` shows it."""
        cli = self.cli(runtime)
        if cli is None:
            return Inspected(None, None)
        answer = self.run(inspect_argv(runtime, cli, container), timeout)
        expected = container if is_full_id(container) else None
        return Inspected(parse_container(answer.out, expected) if answer.rc == 0 else None, answer)


class ContainerReader:
    """describe() for host PIDs, during one module run: each container's runtime is asked once for its name and image.

    ``find(name)``: the path of a runtime's command (None: not installed), ``run``: how it is run (run_cli),
    ``proc``: where /proc is."""

    def __init__(self, find: t.Optional[FindCli] = None, run: RunCli = run_cli, timeout: float = INSPECT_TIMEOUT_S,
                 proc: str = procfs.PROC) -> None:
        self._client = RuntimeClient(find, run)
        self._timeout = timeout
        self._proc = proc
        self._seen: t.Dict[t.Tuple[str, str], t.Tuple[t.Optional[str], t.Optional[str]]] = {}

    def describe(self, pid: int) -> t.Optional[t.Dict[str, t.Any]]:
        """``{runtime, id, name, image}`` (and ``pod_uid`` for Kubernetes) of the container of host process ``pid``;
        None when it is in none."""
        ref = container_of(pid, self._proc)
        if ref is None:
            return None
        name, image = self._inspect(ref)
        fact: t.Dict[str, t.Any] = {"runtime": ref.runtime, "id": ref.container_id, "name": name, "image": image}
        if ref.runtime == KUBERNETES:
            fact["pod_uid"] = ref.pod_uid
        return fact

    def _inspect(self, ref: ContainerRef) -> t.Tuple[t.Optional[str], t.Optional[str]]:
        key = (ref.runtime, ref.container_id)
        if key not in self._seen:
            self._seen[key] = self._ask(ref)
        return self._seen[key]

    def _ask(self, ref: ContainerRef) -> t.Tuple[t.Optional[str], t.Optional[str]]:
        state, answer = self._client.inspect(ref.runtime, ref.container_id, self._timeout)
        if answer is not None and answer.timed_out:
            self._client.forget(ref.runtime)  # a runtime that did not answer in time is not asked again
        return (None, None) if state is None else (state.name, state.image)
