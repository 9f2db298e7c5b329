# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for the docker and podman command lines, as _host/container.py run_cli runs them: ``inspect``, ``stop``,
``update --restart=no`` and ``update --help`` on a table of containers, every command recorded."""

from __future__ import annotations

import json
import os
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import CliAnswer

PODMAN_ID = "8fd36c8d5a99a28559a9895fbc7c0a2ca572739d43944a7c65ee78fd43248c78"
DOCKER_ID = "e5389049fa9ad6ab042ef7f0a01eac5ac2717addc5ad949c7c7e9d6e71e16314"
POD_UID = "0b8c6d1e-58a3-4c1c-9f0e-2d4b5a6c7e8f"
K8S_ID = "4f" * 32
# `podman update --help` of podman 4.3 (no --restart), and of a docker or podman whose update takes one
UPDATE_HELP_WITHOUT_RESTART = "Update an existing container\n\nOptions:\n      --cpus float   Number of CPUs\n  -m, --memory   Memory limit\n"
UPDATE_HELP_WITH_RESTART = UPDATE_HELP_WITHOUT_RESTART + "      --restart string   Restart policy to apply when a container exits\n"


class FakeContainer:
    """One container: its runtime, name, image, main process (host PID), restart policy and state."""

    def __init__(self, runtime: str, container_id: str, name: str, image: str, pid: int, policy: str = "always") -> None:
        self.runtime = runtime
        self.id = container_id
        self.name = name
        self.image = image
        self.pid = pid
        self.policy = policy
        self.running = True
        self.restart_count = 0
        self.restart_in: t.Optional[int] = None  # inspects left before its runtime starts it again

    def inspect(self) -> t.Dict[str, t.Any]:
        """The fields of `docker inspect` / `podman inspect` that gpu_reclaim reads, each where that runtime writes it."""
        item: t.Dict[str, t.Any] = {
            "Id": self.id, "RestartCount": self.restart_count,
            "State": {"Running": self.running, "Status": "running" if self.running else "exited", "Pid": self.pid if self.running else 0},
            "HostConfig": {"RestartPolicy": {"Name": "" if self.runtime == "podman" and self.policy == "no" else self.policy,
                                             "MaximumRetryCount": 0}},
        }
        if self.runtime == "docker":
            item.update(Name="/" + self.name, Image="sha256:" + "b" * 64, Config={"Image": self.image})
        else:
            item.update(Name=self.name, ImageName=self.image, Config={"Image": self.image})
        return item


class FakeRuntimeCli:
    """Plays run_cli for docker and podman. ``on_stop(container)`` runs when a stop ends a container (the test ends its
    processes there); a container id in ``stop_fails`` keeps running after its stop (the command exits 125), one in
    ``restarts`` is started again after its stop, once it was inspected stopped (a runtime applying its restart policy
    a moment after the stop returned). ``restart_update``:
    runtime -> whether its update takes --restart."""

    def __init__(self, containers: t.Iterable[FakeContainer], on_stop: t.Callable[[FakeContainer], None] = lambda container: None,
                 restart_update: t.Optional[t.Mapping[str, bool]] = None) -> None:
        self.containers = {container.id: container for container in containers}
        self.on_stop = on_stop
        self.restart_update = {"docker": True, "podman": True}
        self.restart_update.update(restart_update or {})
        self.stop_fails: t.Set[str] = set()
        self.restarts: t.Set[str] = set()
        self.calls: t.List[t.Tuple[t.List[str], float]] = []
        self.called_at: t.List[float] = []  # time.monotonic() of each call, beside self.calls

    def commands(self, verb: str) -> t.List[t.List[str]]:
        """The argv of each command run whose first argument is ``verb``, in order."""
        return [argv for argv, _timeout in self.calls if argv[1:2] == [verb]]

    def __call__(self, argv: t.Sequence[str], timeout: float) -> CliAnswer:
        self.calls.append((list(argv), timeout))
        self.called_at.append(time.monotonic())
        runtime, args = os.path.basename(argv[0]), list(argv[1:])
        if args[:1] == ["inspect"]:
            container = self.containers.get(args[-1])
            if container is None or container.runtime != runtime:
                return CliAnswer(125, "[]\n", err="Error: no such container %s\n" % args[-1])
            if container.restart_in == 0:
                container.running, container.restart_count, container.restart_in = True, container.restart_count + 1, None
            elif container.restart_in is not None:
                container.restart_in -= 1
            return CliAnswer(0, json.dumps([container.inspect()], indent=4))
        if args[:2] == ["update", "--help"]:
            return CliAnswer(0, UPDATE_HELP_WITH_RESTART if self.restart_update[runtime] else UPDATE_HELP_WITHOUT_RESTART)
        if args[:2] == ["update", "--restart=no"] and args[2] in self.containers and self.restart_update[runtime]:
            self.containers[args[2]].policy = "no"
            return CliAnswer(0, args[2] + "\n")
        if args[:2] == ["stop", "-t"]:
            failed = []
            for container_id in args[3:]:
                container = self.containers[container_id]
                if container_id in self.stop_fails:
                    failed.append(container_id)
                    continue
                container.running = False
                self.on_stop(container)
                if container_id in self.restarts:
                    container.restart_in = 1
            if failed:
                return CliAnswer(125, "", err="Error: timed out waiting for %s to stop\n" % failed[0])
            return CliAnswer(0, "".join(container_id + "\n" for container_id in args[3:]))
        return CliAnswer(125, "", err="Error: unknown command %s\n" % " ".join(args))
