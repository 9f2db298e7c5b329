# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim and containers: which of a run's targets run in a container, and what becomes of each container.

A process that runs in a container is never signalled by gpu_reclaim: its runtime owns it. A container's PID 1 has no
default signal actions (it ignores SIGTERM), and once it is killed the runtime applies the container's restart policy
with processes of its own (podman's ``container cleanup``), which a respawn watch would take for the holder's. So the
targets of a run (holders, launchers, their trees) that run in a container, read from their cgroups
(_host/container.py), are set apart by container, and the run:

- with ``containers: refuse`` (the default), fails before it signals or stops anything, naming each container (its
  runtime, name or id, image) and the option to set;
- with ``containers: stop``, stops each container through its runtime's command line (``docker stop -t N ID``,
  ``podman stop -t N ID``: the container's stop signal, then SIGKILL after N seconds), verifies the GPUs as always, and
  reads each container again: one that runs again fails the run. With ``container_restart: disable`` it then sets the
  container's restart policy to ``no`` (``docker update --restart=no ID``, ``podman update --restart=no ID`` where
  podman's update has ``--restart``);
- refuses a Kubernetes container whatever ``containers`` says: the kubelet owns it and starts it again; its pod's UID
  names it.

A container this module itself runs in is no container here: its processes are the host's for the run.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import os
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import DOCKER, INSPECT_TIMEOUT_S, KUBERNETES, PODMAN
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import conmon_container_id, is_full_id, is_port_publisher, publishing_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import program_names
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import CliAnswer, ContainerRef, ContainerState, FindCli, RunCli
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import RuntimeClient, failure, run_cli, starts_again
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Target
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import CONTAINER_RESTART_DISABLE, CONTAINERS_STOP, ReclaimSpec
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import Problem, Reading, Signalled

# how long a runtime's stop may take beyond its own -t (the runtime's SIGKILL, its clean-up) before it is given up
STOP_SLACK_S = 30.0
UPDATE_TIMEOUT_S = 30.0
INSPECT_RETRY_S = 0.5
# the restart policies under which a runtime starts a container again when it exits by itself (never after its stop)
RESTARTS_ON_EXIT = ("always", "unless-stopped", "on-failure")
SHORT_ID = 12

ContainerOf = t.Callable[[int], t.Optional[ContainerRef]]


def stop_argv(cli: str, seconds: int, ids: t.Sequence[str]) -> t.List[str]:
    """``docker stop`` / ``podman stop``: each container's stop signal, SIGKILL after ``seconds``."""
    return [cli, "stop", "-t", str(seconds)] + list(ids)


def disable_restart_argv(cli: str, container_id: str) -> t.List[str]:
    """``docker update`` / ``podman update``: the container's restart policy set to no."""
    return [cli, "update", "--restart=no", container_id]


def stop_seconds(grace: float, time_left: float) -> int:
    """The stop's -t (whole seconds): ``grace``, at most the time the task has left, rounded up."""
    return int(math.ceil(max(0.0, min(grace, time_left))))


class HeldContainer:
    """A container that runs targets of the plan: its reference (from a cgroup), those targets, what its runtime says
    of it, and what became of it."""

    def __init__(self, ref: ContainerRef) -> None:
        self.ref = ref
        self.targets: t.List[Target] = []
        self.state: t.Optional[ContainerState] = None  # inspect's answer before anything is done
        self.inspect_error: t.Optional[str] = None
        self.refused: t.Optional[str] = None  # why the run refuses it, in words
        self.stopped = False  # the stop was asked for
        self.stop_error: t.Optional[str] = None
        self.stopped_s: t.Optional[float] = None  # seconds the runtime took to stop it
        self.after: t.Optional[ContainerState] = None  # inspect's answer after the stop (and the policy change)
        self.policy_error: t.Optional[str] = None

    @property
    def runtime(self) -> str:
        return self.ref.runtime

    @property
    def id(self) -> str:
        return self.ref.container_id

    @property
    def gpus(self) -> t.List[int]:
        return sorted({gpu for target in self.targets for gpu in target.gpus})

    @property
    def pids(self) -> t.List[int]:
        return sorted(target.pid for target in self.targets)

    @property
    def restart_policy(self) -> t.Optional[str]:
        return None if self.state is None else self.state.restart_policy

    def label(self) -> str:
        """The container as an operator finds it: runtime, name (or id) and image; for Kubernetes, the pod's UID."""
        if self.runtime == KUBERNETES:
            return "Kubernetes container %s of pod %s" % (self.id[:SHORT_ID], self.ref.pod_uid or "(UID unknown)")
        name = self.state.name if self.state is not None else None
        image = self.state.image if self.state is not None else None
        return "%s container %s (%s image %s)" % (self.runtime, name or self.id[:SHORT_ID],
                                                  "id %s," % self.id[:SHORT_ID] if name else "name unknown,", image or "unknown")

    def holding(self) -> str:
        """"holds GPU 0 through PID 7153 (python3)": what of it the plan found."""
        holders = [target for target in self.targets if target.gpus] or self.targets
        return "holds GPU %s through %s" % (", ".join(str(gpu) for gpu in self.gpus) or "?", ", ".join(
            "PID %d (%s)" % (target.pid, target.name or "?") for target in holders))

    def fact(self) -> t.Dict[str, t.Any]:
        """runtime, id, name and image (and pod_uid for Kubernetes), as gpu_facts names a holder's container."""
        fact: t.Dict[str, t.Any] = {"runtime": self.runtime, "id": self.id, "name": self.state.name if self.state else None,
                                    "image": self.state.image if self.state else None}
        if self.runtime == KUBERNETES:
            fact["pod_uid"] = self.ref.pod_uid
        return fact

    def entry(self) -> t.Dict[str, t.Any]:
        """What the result says of it (would_stop_containers, containers_refused, containers_stopped)."""
        return dict(self.fact(), gpus=self.gpus, pids=self.pids, restart_policy=self.restart_policy)

    def stopped_entry(self) -> t.Dict[str, t.Any]:
        """The result's containers_stopped entry."""
        running = None if self.after is None else self.after.running
        policy_after = self.after.restart_policy if self.after is not None and self.after.restart_policy is not None else None
        return dict(self.entry(), stopped=self.stop_error is None and running is False, running_after=running,
                    seconds_to_stop=self.stopped_s, error=self.stop_error, restart_policy_after=policy_after,
                    restart_policy_error=self.policy_error,
                    starts_again=starts_again(self.runtime, policy_after if policy_after is not None else self.restart_policy))


def set_apart(targets: t.Sequence[Target], container_of: ContainerOf,
              own: t.Optional[ContainerRef]) -> t.Tuple[t.List[Target], t.List[HeldContainer]]:
    """The targets that run on the host (to signal), and the containers the others run in, each with its targets (in the
    plan's order). ``own``: the container this module runs in, whose processes count as the host's."""
    host: t.List[Target] = []
    held: t.Dict[t.Tuple[str, str], HeldContainer] = {}
    for target in targets:
        ref = container_of(target.pid)
        if ref is None or (own is not None and (ref.runtime, ref.container_id) == (own.runtime, own.container_id)):
            host.append(target)
            continue
        held.setdefault((ref.runtime, ref.container_id), HeldContainer(ref)).targets.append(target)
    return host, list(held.values())


def hold(targets: t.Sequence[Target], container_of: ContainerOf, spec: ReclaimSpec,
         check_mode: bool) -> t.Tuple[t.List[Target], t.List[HeldContainer]]:
    """set_apart() for a run, this module's own container read now. In check mode, the caller's own containers
    (``managed_containers``), which the caller stops itself before the real run: a check run counts their processes as
    that stop's; a real run refuses them or stops them through their runtime like any other."""
    host, held = set_apart(targets, container_of, container_of(os.getpid()))
    if check_mode and spec.managed_containers:
        mine = [container for container in held if container.id.startswith(tuple(spec.managed_containers))]
        host += [target for container in mine for target in container.targets]
        held = [container for container in held if container not in mine]
    return host, held


class Runtimes:
    """The container runtimes' command lines, as one run uses them: _host/container.py's RuntimeClient (each command
    found once by ``find``: the module's get_bin_path, the PATH's by default; run by ``run``: run_cli), with what a run
    asks of them beyond it."""

    def __init__(self, find: t.Optional[FindCli] = None, run: t.Optional[RunCli] = None) -> None:
        # run_cli as this module names it, where a test may stand in for it
        self._client = RuntimeClient(find, run or run_cli)
        self._restart_update: t.Dict[str, bool] = {}

    def cli(self, runtime: str) -> t.Optional[str]:
        """The path of ``docker`` or ``podman``; None when it is not installed."""
        return self._client.cli(runtime)

    def run(self, argv: t.Sequence[str], timeout: float) -> CliAnswer:
        return self._client.run(argv, timeout)

    def inspect(self, runtime: str, container_id: str) -> t.Tuple[t.Optional[ContainerState], t.Optional[str]]:
        """(the container as ``inspect`` shows it, None and why when it cannot be read)."""
        state, answer = self._client.inspect(runtime, container_id)
        if answer is None:
            return None, "%s is not installed here (not found on the PATH)" % runtime
        if answer.rc not in (0, None):
            # asked once more: podman 4.3 answers "container not known" for a live container now and then while another
            # podman command changes its store
            time.sleep(INSPECT_RETRY_S)
            state, answer = self._client.inspect(runtime, container_id)
        if state is None:
            return None, "%s inspect %s: %s" % (runtime, container_id[:SHORT_ID], failure(t.cast(CliAnswer, answer), INSPECT_TIMEOUT_S))
        return state, None

    def publisher(self, name: str, cmdline: t.Sequence[str], port: int) -> t.Optional[ContainerRef]:
        """The container whose published ``port`` the runtime's process (``name``, ``cmdline``) holds on the host:
        conmon names it on its command line; docker is asked which container publishes the port (docker-proxy). None
        for any other process, or when docker does not name exactly one."""
        if not is_port_publisher(name, cmdline):
            return None
        found = conmon_container_id(cmdline)
        if found:
            return ContainerRef(PODMAN, found, engine=PODMAN)
        cli = self.cli(DOCKER) if "docker-proxy" in {name} | set(program_names(name, cmdline)) else None
        if cli is None:
            return None
        answer = self.run(publishing_argv(cli, port), INSPECT_TIMEOUT_S)
        ids = [word for word in answer.out.split() if is_full_id(word)] if answer.rc == 0 else []
        return ContainerRef(DOCKER, ids[0], engine=DOCKER) if len(ids) == 1 else None

    def can_disable_restart(self, runtime: str) -> bool:
        """Whether this runtime's ``update`` takes --restart (docker's does; podman's only in versions that added it)."""
        if runtime not in self._restart_update:
            cli = self.cli(runtime)
            answer = self.run([cli, "update", "--help"], INSPECT_TIMEOUT_S) if cli else CliAnswer(None, "")
            self._restart_update[runtime] = answer.rc == 0 and "--restart" in answer.out + answer.err
        return self._restart_update[runtime]


def judge(held: t.Sequence[HeldContainer], spec: ReclaimSpec, runtimes: Runtimes) -> None:
    """Read each container's runtime (name, image, restart policy) and decide whether the run refuses it (``refused``)."""
    for container in held:
        if container.runtime != KUBERNETES:
            container.state, container.inspect_error = runtimes.inspect(container.runtime, container.id)
        container.refused = _refusal(container, spec, runtimes)


def _refusal(container: HeldContainer, spec: ReclaimSpec, runtimes: Runtimes) -> t.Optional[str]:
    what = "%s %s" % (container.label(), container.holding())
    if container.runtime == KUBERNETES:
        return ("%s: the kubelet owns it and would start it again, so gpu_reclaim neither signals nor stops it (whatever containers "
                "says): delete or scale down the pod with UID %s, or drain the node" % (what, container.ref.pod_uid or "unknown"))
    if spec.containers != CONTAINERS_STOP:
        return ("%s: a container's processes are never signalled (its runtime owns them); set containers: stop to stop it through "
                "%s (%s stop), or stop it yourself" % (what, container.runtime, container.runtime))
    if container.state is None:
        return ("%s: containers: stop, but %s cannot stop it: %s (podman knows the containers of the user it runs as only: root's "
                "to root's podman, a rootless one to its user's): stop it yourself" % (what, container.runtime, container.inspect_error))
    if (spec.container_restart == CONTAINER_RESTART_DISABLE and container.restart_policy not in (None, "no")
            and not runtimes.can_disable_restart(container.runtime)):
        return ("%s: container_restart: disable, but this %s cannot change a container's restart policy (its update command has no "
                "--restart; podman 4.3's has none), which is %s: set container_restart: keep, or stop it yourself and recreate it "
                "with --restart=no" % (what, container.runtime, container.restart_policy))
    return None


def stop(held: t.Sequence[HeldContainer], runtimes: Runtimes, seconds: int, clock: t.Callable[[], float]) -> None:
    """Stop every container (one command per runtime, all its containers at once), then read each again. A container
    that runs after its stop has ``stop_error``."""
    by_runtime: t.Dict[str, t.List[HeldContainer]] = {}
    for container in held:
        by_runtime.setdefault(container.runtime, []).append(container)
    for runtime, containers in sorted(by_runtime.items()):
        cli = t.cast(str, runtimes.cli(runtime))  # judge() refused a container whose runtime is not installed
        argv = stop_argv(cli, seconds, [container.id for container in containers])
        began = clock()
        answer = runtimes.run(argv, seconds + STOP_SLACK_S)
        took = round(clock() - began, 3)
        for container in containers:
            container.stopped = True
            container.stopped_s = took
            container.after, error = runtimes.inspect(runtime, container.id)
            said = "%s stop -t %d %s: %s" % (runtime, seconds, container.id[:SHORT_ID],
                                             failure(answer, seconds + STOP_SLACK_S) if answer.rc != 0 else "exited 0")
            if container.after is None:
                container.stop_error = "%s; and then %s" % (said, error)
            elif container.after.running is not False:
                container.stop_error = "%s; it still runs" % said


def disable_restart(held: t.Sequence[HeldContainer], runtimes: Runtimes) -> None:
    """Set the restart policy of every container stopped without error to no (one whose policy is no already is left
    alone), then read it again; ``policy_error`` says what failed."""
    for container in held:
        if container.stop_error is not None or container.after is None or container.after.restart_policy in (None, "no"):
            continue
        cli = t.cast(str, runtimes.cli(container.runtime))
        answer = runtimes.run(disable_restart_argv(cli, container.id), UPDATE_TIMEOUT_S)
        after, error = runtimes.inspect(container.runtime, container.id)
        if after is not None:
            container.after = after
        if answer.rc != 0 or after is None or after.restart_policy != "no":
            container.policy_error = "%s update --restart=no %s: %s" % (
                container.runtime, container.id[:SHORT_ID],
                failure(answer, UPDATE_TIMEOUT_S) if answer.rc != 0 else error or "its restart policy is still %s" % after.restart_policy)


def running_again(held: t.Sequence[HeldContainer], runtimes: Runtimes) -> t.List[t.Tuple[HeldContainer, str]]:
    """After the verification: each stopped container that runs again (its runtime started it), with why in words."""
    found = []
    for container in held:
        if container.stop_error is not None or not container.stopped:
            continue
        now, _error = runtimes.inspect(container.runtime, container.id)
        if now is not None and now.running:
            before = container.after.restart_count if container.after is not None else None
            found.append((container, "%s started %s again after its stop (restart policy %s, restart count %s -> %s): stop it yourself, "
                                     "and set container_restart: disable" % (
                                         container.runtime, container.label(), now.restart_policy, before, now.restart_count)))
            container.after = now
    return found


def may_restart(held: t.Sequence[HeldContainer]) -> bool:
    """A stopped container has a restart policy under which its runtime starts it when it exits by itself."""
    return any(container.stopped and container.restart_policy in RESTARTS_ON_EXIT for container in held)


def stop_all(held: t.Sequence[HeldContainer], runtimes: Runtimes, spec: ReclaimSpec, time_left: float, clock: t.Callable[[], float]) -> float:
    """Stop every container that runs targets through its runtime (its -t: ``grace``, at most ``time_left``), then,
    with ``container_restart: disable``, set its restart policy to no. When the stops ended, on ``clock``."""
    stop(held, runtimes, stop_seconds(spec.grace, time_left), clock)
    if spec.container_restart == CONTAINER_RESTART_DISABLE:
        disable_restart(held, runtimes)
    return clock()


def stopped_pids(held: t.Sequence[HeldContainer]) -> Signalled:
    """The targets of the stopped containers, each with why NVML may still list it and whether waiting may help (the
    verification takes them for this run's, as a signalled target)."""
    found: t.Dict[int, t.Tuple[str, bool]] = {}
    for container in held:
        if container.stop_error is not None:
            why = (container.stop_error, False)
        else:
            why = ("its %s was stopped through %s, yet NVML still lists it" % (container.label(), container.runtime), True)
        found.update((pid, why) for pid in container.pids)
    return found


def problems_after(held: t.Sequence[HeldContainer], runtimes: Runtimes, after: t.Mapping[int, Reading]) -> t.List[Problem]:
    """After the verification: a container that still runs after its stop (when NVML no longer names its holders), one
    its runtime started again, one whose restart policy could not be set to no. Each fails the GPUs it held."""
    problems: t.List[Problem] = []
    listed = {index: {holder.pid for holder in reading.holders} for index, reading in after.items()}
    for container in held:
        if container.stop_error is not None:
            problems += [Problem(gpu, "GPU %d: %s %s: %s" % (gpu, container.label(), container.holding(), container.stop_error), False)
                         for gpu in container.gpus if gpu in after and not listed[gpu] & set(container.pids)]
        if container.policy_error is not None:
            problems += [Problem(gpu, "GPU %d: %s was stopped, but its restart policy (%s) is not no: %s" % (
                gpu, container.label(), container.restart_policy, container.policy_error), False) for gpu in container.gpus if gpu in after]
    for container, text in running_again(held, runtimes):
        problems += [Problem(gpu, "GPU %d: %s" % (gpu, text), False) for gpu in container.gpus if gpu in after]
    return problems


def fact_of(pid: int, held: t.Sequence[HeldContainer], container_of: ContainerOf, runtimes: Runtimes) -> t.Optional[t.Dict[str, t.Any]]:
    """The container of ``pid`` (runtime, id, name, image; pod_uid for Kubernetes), None when it runs in none."""
    for container in held:
        if pid in container.pids:
            return container.fact()
    ref = container_of(pid)
    if ref is None:
        return None
    found = HeldContainer(ref)
    if ref.runtime != KUBERNETES:
        found.state, _error = runtimes.inspect(ref.runtime, ref.container_id)
    return found.fact()


def restart_warnings(held: t.Sequence[HeldContainer], runtimes: Runtimes) -> t.List[str]:
    """For each container stopped (check mode: to stop) whose runtime may start it again by itself, when and how."""
    warnings = []
    for container in held:
        policy = container.after.restart_policy if container.after is not None and container.after.restart_policy else container.restart_policy
        again = starts_again(container.runtime, policy)
        if again is None:
            continue
        if runtimes.can_disable_restart(container.runtime):
            how = "set container_restart: disable (%s update --restart=no), or remove the container" % container.runtime
        else:
            how = "remove the container (this %s cannot change a restart policy), or recreate it with --restart=no" % container.runtime
        warnings.append("%s stays stopped until its runtime starts it again: %s; %s, to keep it from taking GPU %s again" % (
            container.label(), again, how, ", ".join(str(gpu) for gpu in container.gpus)))
    return warnings
