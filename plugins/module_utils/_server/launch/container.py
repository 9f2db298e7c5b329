# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ``container`` launch mode: the server runs in a container of podman or docker, started with ``run -d``.

The container is named after the server and labelled with the configuration hash and the role's marker; ``inspect``
tells whether it runs, its main process as the host numbers it (State.Pid), its hash, its restart policy, its last
exit code and its restart count. Its environment comes from an environment file (mode 0600, passed with
``--env-file``), never from the command line. GPUs are CDI devices (podman: ``--device KIND=N``) or docker's
``--gpus "device=N,M"``. A record beside it (mode 0600) names the runtime and the container. status(), stop() and
launch() take the arguments and return the keys of process.py's.

The runtime's commands run through _host/container.py's RuntimeClient, which reads its ``inspect`` answer too; here
they run without a timeout, as the task's own commands: ``run -d`` may pull the image first, and ``stop -t N`` takes up
to N seconds.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import os
import re
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import CliAnswer, ContainerState, RuntimeClient, run_cli
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.mode import DEFAULT_CDI_KIND, DOCKER, HOST_NETWORK, RUNTIMES
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import (
    LaunchSpec, ServerError, Target, base_reading, with_health,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.systemd import (
    PRIVATE_MODE, create_private, ended_members, snapshot_then_drain, state_dir, write_if_changed,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    carry_last_good, read_unit_record, remove_record, string_env, write_record,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._server.unit import start_time

MODE = "container"
RESTART_POLICIES = ("no", "on-failure", "always", "unless-stopped")
HASH_LABEL = "gpuops.fleet.config-hash"
MARKER_LABEL = "gpuops.fleet.managed-by"
MARKER = "gpuops.fleet.vllm_server"
SERVER_LABEL = "gpuops.fleet.server"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CDI_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME = re.compile(r"^[^=\s#][^=\n\x00]*$")
ENV_HEADER = ("# Ansible managed\n"
              "# Environment of vLLM server %s, read by its container's runtime (--env-file): secrets may be in it,\n"
              "# so only its owner reads it (mode 0600). One KEY=value a line, the value as it is, to the end of the line.\n")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
# the processes that hold a published port on the host for a container (podman's conmon and rootlessport, docker-proxy)
_PORT_HOLDERS = ("docker-proxy", "rootlessport", "rootlessport-child")


class ContainerSpec(t.NamedTuple):
    """How the container is run (the keys of vllm_process's ``container`` option)."""

    name: str
    image: str = ""
    runtime: t.Optional[str] = None
    gpus: t.Sequence[int] = ()
    cdi_kind: str = DEFAULT_CDI_KIND
    network: str = HOST_NETWORK
    port: t.Optional[int] = None
    volumes: t.Sequence[str] = ()
    run_options: t.Sequence[str] = ()
    restart: str = "unless-stopped"
    env_file: str = ""


def spec_of(options: t.Optional[t.Mapping[str, t.Any]]) -> ContainerSpec:
    """The ContainerSpec of vllm_process's ``container`` option (a missing key takes its default)."""
    options = {key: value for key, value in (options or {}).items() if value is not None and key in ContainerSpec._fields}
    if not options.get("name"):
        raise ServerError("container.name: the container mode needs the container's name")
    return ContainerSpec(**options)


def gpu_args(runtime: str, gpus: t.Sequence[int], cdi_kind: str = DEFAULT_CDI_KIND) -> t.List[str]:
    """The GPUs of the container: podman's CDI devices (``--device KIND=N`` each), docker's ``--gpus "device=N,M"``
    (the double quotes are part of the value: docker reads it as CSV, and the list's commas are inside one field)."""
    if not gpus:
        return []
    if runtime == DOCKER:
        return ["--gpus", '"device=%s"' % ",".join(str(int(gpu)) for gpu in gpus)]
    args: t.List[str] = []
    for gpu in gpus:
        args += ["--device", "%s=%d" % (cdi_kind, int(gpu))]
    return args


def network_args(network: str, port: t.Optional[int]) -> t.List[str]:
    """The host's network (the server's port is the host's), or another network with the port published as itself."""
    if network == HOST_NETWORK:
        return ["--network", HOST_NETWORK]
    args = ["--network", network]
    if port:
        args += ["-p", "%d:%d" % (int(port), int(port))]
    return args


def labels(config_hash: t.Optional[str], server: str) -> t.Dict[str, str]:
    """The container's labels: the role's marker, the server's name and the configuration hash."""
    found = {MARKER_LABEL: MARKER, SERVER_LABEL: server}
    if config_hash:
        found[HASH_LABEL] = config_hash
    return found


def run_argv(cli: str, runtime: str, spec: ContainerSpec, command: t.Sequence[str], config_hash: t.Optional[str],
             server: str) -> t.List[str]:
    """``RUNTIME run -d`` of the container: name, labels, environment file, --ipc=host, network, restart policy, GPUs,
    volumes, the extra run options, then the image and ``command`` (the server's argv). No environment value is in it."""
    argv = [cli, "run", "-d", "--name", spec.name]
    for key, value in sorted(labels(config_hash, server).items()):
        argv += ["--label", "%s=%s" % (key, value)]
    if spec.env_file:
        argv += ["--env-file", spec.env_file]
    argv.append("--ipc=host")
    argv += network_args(spec.network, spec.port)
    argv += ["--restart", spec.restart]
    argv += gpu_args(runtime, spec.gpus, spec.cdi_kind)
    for volume in spec.volumes:
        argv += ["-v", str(volume)]
    argv += [str(option) for option in spec.run_options]
    argv.append(spec.image)
    argv += [str(word) for word in command]
    return argv


def check_spec(spec: ContainerSpec) -> None:
    """Raises ServerError naming the option and its value when the container cannot be run as ``spec`` says."""
    if not NAME.match(spec.name):
        raise ServerError("container.name=%s: a container name is letters, digits, '_', '.' or '-'" % json.dumps(spec.name))
    if spec.runtime is not None and spec.runtime not in RUNTIMES:
        raise ServerError("container.runtime=%s: expected one of %s" % (json.dumps(spec.runtime), ", ".join(RUNTIMES)))
    if spec.restart.split(":", 1)[0] not in RESTART_POLICIES:
        raise ServerError("container.restart=%s: expected one of %s" % (json.dumps(spec.restart), ", ".join(RESTART_POLICIES)))
    if not CDI_KIND.match(spec.cdi_kind):
        raise ServerError("container.cdi_kind=%s: a CDI kind is VENDOR/CLASS, such as nvidia.com/gpu" % json.dumps(spec.cdi_kind))
    if not spec.network or spec.network.startswith("-"):
        raise ServerError("container.network=%s: expected host or a network's name" % json.dumps(spec.network))


def env_file_text(name: str, env: t.Mapping[str, t.Any]) -> str:
    """The container's environment file: a header naming the server, then ``KEY=value`` for each variable, sorted by
    name, the value as it is (the runtimes read it to the end of the line, no quoting). A name or value that such a
    line cannot carry (a newline, a NUL byte, '=' or a leading '#' in a name) is a ServerError naming the variable only."""
    lines = [ENV_HEADER % _CONTROL.sub(" ", name)]
    for key, value in sorted(string_env(env).items()):
        if not ENV_NAME.match(key) or "\n" in value or "\r" in value or "\x00" in value:
            raise ServerError("env: the variable %s cannot be a line of the container's environment file (a newline or NUL in its "
                              "value, or a name with '=', a newline or a leading '#' or space); its value is not shown" % json.dumps(key))
        lines.append("%s=%s\n" % (key, value))
    return "".join(lines)


# ---- the runtime's command line ------------------------------------------------------------------------------------

def find_runtime(module: t.Any, wanted: t.Optional[str], recorded: t.Optional[str] = None) -> t.Tuple[t.Optional[str], t.Optional[str]]:
    """(runtime, path of its command): ``wanted``, else the record's, else podman, then docker, as installed
    (module.get_bin_path); (None, None) when none is installed (a wanted one that is missing is a ServerError)."""
    if wanted:
        return wanted, module.get_bin_path(wanted, required=True)
    for runtime in ([recorded] if recorded in RUNTIMES else []) + list(RUNTIMES):
        path = module.get_bin_path(runtime)
        if path:
            return runtime, path
    return None, None


def described(state: ContainerState) -> t.Dict[str, t.Any]:
    """What the role reads of the container's ``inspect`` answer: id, name, image, running, status, pid (the main process
    as the host numbers it; None when it does not run), config_hash (its label), marker, restart_policy, restart_count,
    exit_code, conmon_pid (podman)."""
    running = bool(state.running)
    return {
        "id": state.id,
        "name": state.name,
        "image": state.image,
        "running": running,
        "status": state.status,
        "pid": state.pid if running and state.pid and state.pid > 0 else None,
        "config_hash": state.labels.get(HASH_LABEL),
        "marker": state.labels.get(MARKER_LABEL),
        "restart_policy": state.restart_policy or "no",
        "restart_count": state.restart_count or 0,
        "exit_code": state.exit_code,
        "conmon_pid": state.conmon_pid,
    }


def _client(cli: str) -> RuntimeClient:
    """The runtime's client, whose command is ``cli`` (find_runtime's)."""
    return RuntimeClient(lambda _name: cli, run_cli)


def expanded(argv: t.Sequence[str]) -> t.List[str]:
    """Each word with a leading ``~`` and ``$VAR`` expanded, as Ansible's run_command expands a command's words (a
    volume such as ``~/.cache/huggingface:/root/.cache/huggingface``): the backend's commands ran through it before."""
    return [os.path.expanduser(os.path.expandvars(word)) for word in argv]


def _cli(argv: t.Sequence[str]) -> t.Tuple[t.Optional[int], str, str]:
    """(exit code, output, error) of the runtime's command ``argv``, run to its end (no timeout: see the module doc)."""
    answer = _client(argv[0]).run(expanded(argv), None)
    return answer.rc, answer.out, answer.err


def _no_such_container(text: str) -> bool:
    return bool(re.search(r"no such (container|object)|no container with name or id", text, re.IGNORECASE))


def inspect(runtime: str, cli: str, name: str) -> t.Optional[t.Dict[str, t.Any]]:
    """described() of the container ``name`` (or id); None when the runtime knows no such container. Another failure is
    a ServerError naming the command and what it said."""
    found, answer = _client(cli).inspect(runtime, name, timeout=None)
    said = t.cast(CliAnswer, answer)  # never None: the client's command for podman or docker is ``cli``
    if said.rc != 0:
        if _no_such_container(said.err + said.out):
            return None
        raise ServerError("%s inspect %s failed (rc %s): %s" % (cli, name, said.rc, (said.err or said.out).strip() or "no message"))
    if found is None:
        raise ServerError("%s inspect %s: its answer is not one container: %s" % (cli, name, said.out.strip()[:200]))
    return described(found)


def runtime_command(cli: str, *args: str, tolerate_missing: bool = False) -> None:
    """Run ``RUNTIME ARGS``; a failure is a ServerError naming the command, except, with ``tolerate_missing``, one
    that says the container is not there."""
    rc, out, err = _cli([cli] + list(args))
    if rc != 0 and not (tolerate_missing and _no_such_container(err + out)):
        raise ServerError("%s %s failed (rc %s): %s" % (cli, " ".join(args), rc, (err or out).strip() or "no message"))


def logs_tail(run_command: t.Callable[..., t.Tuple[int, str, str]], cli: str, name: str, lines: int) -> t.List[str]:
    """The last lines of the container's output (``RUNTIME logs --tail N NAME``); the error in one line on a failure."""
    rc, out, err = run_command([cli, "logs", "--tail", str(lines), name])
    if rc != 0:
        return ["(%s logs %s failed: %s)" % (cli, name, (err or out).strip())]
    return (out + err).splitlines()[-lines:] if lines > 0 else []


# ---- the backend ---------------------------------------------------------------------------------------------------

def _container(target: Target) -> ContainerSpec:
    return spec_of(target.container)


def crash_loop(found: t.Optional[t.Mapping[str, t.Any]]) -> str:
    """The container's restarts in words, when its runtime restarted it or it exited with an error; else ''."""
    if not found:
        return ""
    count = found.get("restart_count") or 0
    code = found.get("exit_code")
    if count <= 0 and (found.get("running") or not code):
        return ""
    said = "container %s: %d restart(s), last exit code %s (restart policy %s)" % (found.get("name"), count, code, found.get("restart_policy"))
    return said + ("" if found.get("running") else ", now %s" % (found.get("status") or "stopped"))


def _reading(psutil: t.Any, target: Target, runtime: t.Optional[str], found: t.Optional[t.Mapping[str, t.Any]],
             record: t.Optional[t.Mapping[str, t.Any]]) -> t.Dict[str, t.Any]:
    pid = found["pid"] if found and found["running"] else None
    reading = base_reading(MODE, target, record, pid, start_time(psutil, pid), found.get("config_hash") if found else None)
    reading.update(container=dict(found, runtime=runtime) if found else None, container_id=found.get("id") if found else None)
    return reading


def _ours(reading: t.Mapping[str, t.Any]) -> None:
    """Raises ServerError when a container of the name exists without the role's marker label: it is never stopped,
    removed or replaced."""
    found = reading.get("container")
    if found is not None and found.get("marker") != MARKER:
        raise ServerError("container %s exists but is not this role's (it has no label %s=%s): it is left alone; remove or rename "
                          "it, or set vllm_server_container_name" % (found.get("name"), MARKER_LABEL, MARKER), reading)


def _read(module: t.Any, psutil: t.Any, target: Target) -> t.Tuple[t.Optional[str], t.Optional[str], t.Dict[str, t.Any]]:
    """(runtime, its command, the reading before /health) of the container ``target`` names."""
    spec = _container(target)
    record = read_unit_record(target.state_file)
    runtime, cli = find_runtime(module, spec.runtime, (record or {}).get("runtime"))
    found = inspect(str(runtime), cli, spec.name) if cli else None
    return runtime, cli, _reading(psutil, target, runtime, found, record)


def status(module: t.Any, psutil: t.Any, target: Target, health_url: t.Optional[str] = None,
           generate: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """What runs now: the container (``inspect``), its configuration-hash label against the wanted one, /health when it
    runs and the generation check when asked. A container that its runtime restarted or that exited with an error, and
    that does not answer /health, has its restarts in ``crash_loop``."""
    _runtime, _cli_path, reading = _read(module, psutil, target)
    reading = with_health(reading, health_url if reading["running"] else None, generate)
    if reading["healthy"] is not True:
        reading["crash_loop"] = crash_loop(reading["container"])
    return reading


def own_port_holder(listener: t.Mapping[str, t.Any], reading: t.Mapping[str, t.Any]) -> bool:
    """Whether the process on the port is the container's own: in it (its container's short id is the container's),
    or, with a published port, the runtime's process that holds the port for it (podman's conmon of the container,
    docker-proxy, rootlessport) while it runs."""
    container = reading.get("container") or {}
    cid = str(reading.get("container_id") or "")
    if not cid or not reading.get("running"):
        return False
    box = listener.get("container") or {}
    if box.get("id") == cid:
        return True
    if container.get("conmon_pid") and str(listener.get("pid")) == str(container["conmon_pid"]):
        return True
    name = str(listener.get("name") or "")
    return name in _PORT_HOLDERS


def stop(module: t.Any, psutil: t.Any, target: Target, drain_url: t.Optional[str] = None, drain_timeout: float = 60.0,
         stop_timeout: float = 30.0, disable: bool = False) -> t.Dict[str, t.Any]:
    """Drain the container's server (when ``drain_url`` and it runs), ``RUNTIME stop -t STOP_TIMEOUT`` it, then
    ``RUNTIME rm`` it and remove the record. Returns the reading before the stop updated: changed, stopped (the
    container's processes that ended), drained (when drained), msg. ``disable`` has no meaning here: a removed
    container does not come back."""
    del disable
    spec = _container(target)
    _runtime, cli, result = _read(module, psutil, target)
    result.update(changed=False, stopped=[])
    _ours(result)
    if result["container"] is None:
        if result["record"] is not None and not module.check_mode:
            remove_record(target.state_file)
        result["msg"] = "no container %s: nothing to stop" % spec.name
        return result
    members = snapshot_then_drain(module, psutil, result, drain_url, drain_timeout)
    result["changed"] = True
    what = "container %s (PID %s)" % (spec.name, result["pid"]) if result["running"] else "container %s (%s)" % (
        spec.name, result["container"].get("status") or "not running")
    if module.check_mode:
        result.update(running=False, msg="would %s %s" % ("stop and remove" if result["running"] else "remove", what))
        return result
    began = time.monotonic()
    if result["running"]:
        runtime_command(str(cli), "stop", "-t", str(int(round(stop_timeout))), spec.name, tolerate_missing=True)
    runtime_command(str(cli), "rm", "-f", spec.name, tolerate_missing=True)
    remove_record(target.state_file)
    result["stopped"] = ended_members(psutil, members, round(time.monotonic() - began, 3))
    was_running = result["running"]
    result.update(running=False, pid=None, create_time=None,
                  msg="%s %s" % ("stopped and removed" if was_running else "removed", what))
    return result


def stop_taken_over(module: t.Any, psutil: t.Any, box: t.Mapping[str, t.Any], drain_url: t.Optional[str] = None,
                    drain_timeout: float = 60.0, stop_timeout: float = 30.0) -> t.Dict[str, t.Any]:
    """Stop a container found serving on the port, never launched here (``box``: its runtime, id and name): drained
    first, then ``RUNTIME stop -t STOP_TIMEOUT ID``. It is never removed, and its restart policy is left as it is (a
    stop by its runtime is one its policy does not undo, until the daemon or the host starts again: ``starts_again``).
    Returns changed, stopped (its processes that ended), drained (when drained), container (what inspect said before
    the stop) and msg."""
    runtime, cid = str(box["runtime"]), str(box["id"])
    said = "%s container %s" % (runtime, box.get("name") or cid[:12])
    cli = module.get_bin_path(runtime, required=True)
    found = inspect(runtime, cli, cid)
    result: t.Dict[str, t.Any] = {"changed": False, "stopped": [], "container": found}
    if found is None or not found["running"]:
        result["msg"] = "the %s no longer runs" % said
        return result
    reading: t.Dict[str, t.Any] = {"pid": found["pid"], "running": True}
    members = snapshot_then_drain(module, psutil, reading, drain_url, drain_timeout)
    if "drained" in reading:
        result["drained"] = reading["drained"]
    result["changed"] = True
    if module.check_mode:
        result["msg"] = "would stop the %s through %s" % (said, runtime)
        return result
    began = time.monotonic()
    runtime_command(str(cli), "stop", "-t", str(int(round(stop_timeout))), cid, tolerate_missing=True)
    result["stopped"] = ended_members(psutil, members, round(time.monotonic() - began, 3))
    result["msg"] = "stopped the %s through %s (it is kept, stopped) and %d process(es) of it" % (said, runtime, len(result["stopped"]))
    return result


def launch(module: t.Any, psutil: t.Any, target: Target, spec: LaunchSpec) -> t.Dict[str, t.Any]:
    """Write the environment file (0600), remove a container of the name that does not run, ``RUNTIME run -d`` the
    container, read its main process and write the record (0600). A container that runs with this configuration is
    left as it is; one that runs with another is a ServerError (stop it first). Check mode writes and starts nothing."""
    container = _container(target)
    check_spec(container)
    if not container.image:
        raise ServerError("container.image: the container mode needs an image to launch")
    if not container.env_file:
        raise ServerError("container.env_file: the container mode needs the environment file's path to launch")
    text = env_file_text(str((spec.metadata or {}).get("name") or container.name), spec.env)
    runtime, cli, reading = _read(module, psutil, target)
    result = dict(reading, changed=False, launched=False, log_file=None)
    _ours(result)
    if cli is None or runtime is None:
        raise ServerError("container.runtime: neither podman nor docker is installed on this host", result)
    if reading["running"]:
        if target.config_hash is not None and reading["config_hash"] != target.config_hash:
            raise ServerError("container %s already runs (PID %s) with another configuration (hash %s, wanted %s): stop it first"
                              % (container.name, reading["pid"], reading["config_hash"], target.config_hash), result)
        result["msg"] = "container %s already runs (PID %s) with this configuration" % (container.name, reading["pid"])
        return result
    argv = run_argv(cli, runtime, container, spec.argv, target.config_hash, str((spec.metadata or {}).get("name") or container.name))
    # the run options as well as the server's argv with their secret arguments masked, wherever the command is shown
    shown = masked_argv(run_argv(runtime, runtime, container, spec.shown_argv, target.config_hash,
                                 str((spec.metadata or {}).get("name") or container.name)))
    result["changed"] = True
    if module.check_mode:
        result.update(running=True, msg="would launch %s" % " ".join(shown))
        return result
    state_dir(target.state_file)
    os.makedirs(os.path.dirname(container.env_file) or ".", exist_ok=True)
    create_private(container.env_file)
    write_if_changed(container.env_file, text, PRIVATE_MODE)
    if reading["container"] is not None:
        runtime_command(cli, "rm", "-f", container.name, tolerate_missing=True)
    rc, out, err = _cli(argv)
    if rc != 0:
        raise ServerError("%s failed (rc %s): %s" % (" ".join(shown), rc, (err or out).strip() or "no message"), result)
    found = inspect(runtime, cli, container.name)
    if found is None or not found["running"] or not found["pid"]:
        said = "it is not there" if found is None else "it is %s, exit code %s" % (found.get("status"), found.get("exit_code"))
        raise ServerError("container %s did not keep running after %s run (%s); %s logs %s shows why"
                          % (container.name, runtime, said, runtime, container.name), dict(result, container=found))
    write_record(target.state_file, {
        "mode": MODE, "runtime": runtime, "container_id": found["id"], "container_name": container.name,
        "image": container.image, "config_hash": target.config_hash, "argv": list(spec.shown_argv),
        "run_argv": shown, "env_keys": sorted(string_env(spec.env)), "env_file": container.env_file,
        "launched_at": time.time(), "metadata": dict(spec.metadata or {}),
        "last_good": carry_last_good(target.state_file),
    })
    result.update(_reading(psutil, target, runtime, found, read_unit_record(target.state_file)))
    result.update(changed=True, launched=True, log_file=None, run_argv=shown,
                  msg="launched container %s (%s, PID %s)" % (container.name, str(found["id"])[:12], found["pid"]))
    return result


def main_process(module: t.Any, psutil: t.Any, state_file: str, name: t.Optional[str] = None,
                 runtime: t.Optional[str] = None) -> t.Tuple[t.Optional[int], t.Optional[float], t.Optional[str], t.Optional[str]]:
    """(host PID and start time of the container's main process, its runtime's command, the container's name) of the
    server recorded at ``state_file`` (or named ``name``); PID and start time None when it does not run."""
    record = read_unit_record(state_file) or {}
    name = name or record.get("container_name")
    if not name:
        return None, None, None, None
    found_runtime, cli = find_runtime(module, runtime, record.get("runtime"))
    if cli is None or found_runtime is None:
        return None, None, None, name
    found = inspect(found_runtime, cli, name)
    pid = found["pid"] if found else None
    return pid, start_time(psutil, pid), cli, name
