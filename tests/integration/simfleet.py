# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated fleet for integration tests: gpusim hosts (gpusim.api) plus real ansible-playbook runs (tests/support).

Every host is a gpusim state directory; its processes are recorded by gpusim and cleaned up by recorded PID only.
The server readings (`server_pid`, `holders`, `health`) are the machine's and the simulator's, never the role's.
`simulator/` and `tests/support/` are on sys.path through pytest.ini's `pythonpath`.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import urllib.request
import typing as t
from pathlib import Path

import psutil

from ansible_run import BIN, REPO, ansible_env, flat, recap, run_playbook  # noqa: F401  # pylint: disable=unused-import  # re-exported
from gpusim.api import SIM_LIB_DIR, Host, free_port, pid_alive, role_host_vars as sim_host_vars, role_inventory
from readings import health, listening_pid  # noqa: F401  # pylint: disable=unused-import  # re-exported

SIM_LIB = SIM_LIB_DIR
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
RESTART = REPO / "playbooks" / "restart_vllm.yml"


class SimHost(Host):
    """One simulated GPU host: gpusim's own API (gpusim.api.Host: spawn_vllm, status, used_mib, cleanup, ...),
    its command line (`gpusim`), and the host's name in an inventory."""

    def __init__(self, name: str, state: Path) -> None:
        super().__init__(state)
        self.name = name
        self.port = 0  # its server's loopback port, when the test gives it one (hosts_with_ports, the fleet fixture)


def write_inventory(path: Path, hosts: t.Sequence[SimHost], **group_vars: t.Any) -> Path:
    """A YAML (here: JSON) inventory of local-connection hosts, one per simulated GPU host."""
    inventory = {
        "all": {
            "vars": dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **group_vars),
            "hosts": {h.name: {"gpuops_fleet_environment": h.environment()} for h in hosts},
        }
    }
    path.write_text(json.dumps(inventory, indent=2))
    return path


def run_module(module: str, inventory: Path, result_dir: Path, args: t.Optional[t.Dict[str, t.Any]] = None,
               *extra: str) -> t.Dict[str, t.Any]:
    """Run one gpuops.fleet module on every host with ansible-playbook; return {host: result}."""
    result_dir.mkdir(parents=True, exist_ok=True)
    vars_file = result_dir / "probe-vars.json"
    vars_file.write_text(json.dumps({"probe_args": args or {}, "probe_result_dir": str(result_dir)}))
    proc = run_playbook(PLAYBOOKS / ("probe_%s.yml" % module), inventory, "-e", "@%s" % vars_file, *extra)
    results = {}
    for path in sorted(result_dir.glob("*.result.json")):
        results[path.name[:-len(".result.json")]] = json.loads(path.read_text())
        path.unlink()
    if not results:
        raise AssertionError("module probe produced no result:\n%s\n%s" % (proc.stdout, proc.stderr))
    return results


def role_host_vars(host: SimHost, port: int, **extra: t.Any) -> t.Dict[str, t.Any]:
    """The role's variables for one simulated host: its own port, state directory and simulated GPUs."""
    return sim_host_vars(host.state, port, **extra)


def write_role_inventory(path: Path, hosts: t.Mapping[str, t.Dict[str, t.Any]], **group_vars: t.Any) -> Path:
    """An inventory whose group vllm_servers holds the given hosts (name -> host vars), driving the fake vLLM."""
    path.write_text(json.dumps(role_inventory(hosts, python=str(BIN / "python3"), **group_vars), indent=2))
    return path


def hosts_with_ports(make_host: t.Callable[..., SimHost], *names: str) -> t.List[SimHost]:
    """Simulated hosts, each with a free loopback port for its server (host.port)."""
    made = []
    for name in names:
        host = make_host(name)
        host.port = free_port()
        made.append(host)
    return made


def inventory_for(tmp_path: Path, hosts: t.Sequence[SimHost], per_host: t.Optional[t.Mapping[str, t.Dict[str, t.Any]]] = None,
                  **group_vars: t.Any) -> Path:
    """tmp_path/inventory.json for the role: each host's own port and state, its `per_host` variables, `group_vars`."""
    entries = {h.name: role_host_vars(h, h.port, **(per_host or {}).get(h.name, {})) for h in hosts}
    return write_role_inventory(tmp_path / "inventory.json", entries, **group_vars)


# ---- readings of a host's server, none of them the role's ------------------------------------------------------


def server_pid(host: SimHost) -> t.Optional[int]:
    """The PID of the process listening on the host's server port (the kernel's socket table), None when none does."""
    return listening_pid(host.port)


def record(host: SimHost) -> t.Dict[str, t.Any]:
    """The role's own record of the server it launched. Read only where the role's file itself is what a test checks
    (its fields, its removal); a server's PID comes from server_pid()."""
    return json.loads((host.state / "role" / ("vllm-%d.json" % host.port)).read_text())


def holders(host: SimHost) -> t.Dict[int, t.List[int]]:
    """GPU index -> PIDs holding it, from the simulator's own reading."""
    return {g["index"]: [h["pid"] for h in g["holders"]] for g in host.status()["gpus"]}


def descends_from(pid: int, ancestor: int) -> bool:
    try:
        return ancestor in [p.pid for p in psutil.Process(pid).parents()]
    except psutil.NoSuchProcess:
        return False


def environ(pid: int) -> t.Dict[str, str]:
    return psutil.Process(pid).environ()


def assert_server_owns_gpus(host: SimHost, gpus: t.Iterable[int], tp: int) -> t.Tuple[int, t.List[int]]:
    """The process listening on the host's port runs, answers /health, and its own descendants (tp of them) hold
    exactly `gpus`; returns (server PID, worker PIDs)."""
    server = server_pid(host)
    assert server is not None and pid_alive(server), "nothing listens on port %d" % host.port
    assert health(host.port) == 200
    held = holders(host)
    workers = []
    for index in gpus:
        assert len(held[index]) == 1, "GPU %d: %s" % (index, held[index])
        assert descends_from(held[index][0], server), "GPU %d is held by PID %d, not by the new server %s" % (
            index, held[index][0], server)
        workers.append(held[index][0])
    assert len(set(workers)) == tp
    return server, workers


def running_requests(port: int) -> float:
    """The server's own count of requests running (/metrics' vllm:num_requests_running); -1 when it does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return -1
    return sum(float(v) for v in re.findall(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, re.M))


def _stream(port: int, max_tokens: int, out: t.Dict[str, t.Any]) -> None:
    """One streamed completion; records whether it ended with [DONE] and how many chunks came."""
    body = json.dumps({"model": "zai-org/GLM-5-GGUF", "prompt": "hello", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body,
                                     headers={"Content-Type": "application/json"})
    out["chunks"], out["done"] = 0, False
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            for line in reply:
                if line.startswith(b"data: [DONE]"):
                    out["done"] = True
                elif line.startswith(b"data: "):
                    out["chunks"] += 1
    except Exception as exc:  # pylint: disable=broad-exception-caught  # a cut stream is what some tests expect
        out["error"] = repr(exc)


def stream_in_flight(port: int, max_tokens: int) -> t.Tuple[threading.Thread, t.Dict[str, t.Any]]:
    """A streamed completion on its own thread, returned once the server counts it running: (thread, what it saw:
    chunks, done, error)."""
    out: t.Dict[str, t.Any] = {}
    client = threading.Thread(target=_stream, args=(port, max_tokens, out), daemon=True)
    client.start()
    deadline = time.monotonic() + 30
    while running_requests(port) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_requests(port) == 1, "the streamed request never ran"
    return client, out
