# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated fleet for integration tests: gpusim hosts plus real ansible-playbook runs.

Every host is a gpusim state directory; its processes are recorded by gpusim and
cleaned up by recorded PID only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "simulator"))

from gpusim import inventory as sim_inventory  # noqa: E402  # pylint: disable=wrong-import-position
from gpusim.api import free_port  # noqa: E402,F401  # pylint: disable=wrong-import-position,unused-import  # re-exported
from gpusim.api import SIM_LIB_DIR, Host  # noqa: E402  # pylint: disable=wrong-import-position

SIM_LIB = SIM_LIB_DIR
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
BIN = Path(sys.executable).parent


class SimHost(Host):
    """One simulated GPU host: gpusim's own API (gpusim.api.Host: spawn_vllm, status, used_mib, cleanup, ...),
    its command line (`gpusim`), and the host's name in an inventory."""

    def __init__(self, name: str, state: Path) -> None:
        super().__init__(state)
        self.name = name

    def gpusim(self, command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=str(REPO / "simulator"))
        proc = subprocess.run(
            [sys.executable, "-m", "gpusim", command, "--state", str(self.state), *args],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError("gpusim %s %s failed (%d): %s %s" % (command, args, proc.returncode, proc.stdout, proc.stderr))
        return proc

    def gpusim_json(self, command: str, *args: str) -> t.Any:
        return json.loads(self.gpusim(command, *args).stdout)

    def environment(self, nvidia_smi: bool = False) -> t.Dict[str, str]:
        """What a play's `environment:` gives the module so the real nvidia-ml-py loads the fake NVML."""
        return super().environment(nvidia_smi)


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


def ansible_env() -> t.Dict[str, str]:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": "%s:%s" % (BIN, env.get("PATH", "")),
    })
    return env


def run_playbook(playbook: Path, inventory: Path, *extra: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the real ansible-playbook; returns the completed process (stdout+stderr as text)."""
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *extra],
        env=ansible_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )


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
    return sim_inventory.host_vars(host.state, port, **extra)


def write_role_inventory(path: Path, hosts: t.Mapping[str, t.Dict[str, t.Any]], **group_vars: t.Any) -> Path:
    """An inventory whose group vllm_servers holds the given hosts (name -> host vars), driving the fake vLLM."""
    path.write_text(json.dumps(sim_inventory.role_inventory(hosts, python=str(BIN / "python3"), **group_vars), indent=2))
    return path


def flat(output: str) -> str:
    """The output with every run of whitespace made one space (the YAML callback wraps long lines)."""
    return " ".join(output.split())


def recap(output: str) -> t.Dict[str, t.Dict[str, int]]:
    """PLAY RECAP counters per host."""
    found = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        found[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counters)}
    return found


def hosts_with_ports(make_host: t.Callable[..., SimHost], *names: str) -> t.List[SimHost]:
    """Simulated hosts, each with a free loopback port for its server (host.port)."""
    made = []
    for name in names:
        host = make_host(name)
        host.port = free_port()  # type: ignore[attr-defined]
        made.append(host)
    return made
