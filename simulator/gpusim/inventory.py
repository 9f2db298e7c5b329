# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An Ansible inventory for simulated hosts on this machine, for the role and the playbooks.

`python -m gpusim.inventory --out inventory.json STATE_DIR:PORT ... [--host-var HOST.KEY=JSON]` writes one; the demo
and the integration tests use role_inventory(). Every host is reached over a local connection; its NVML modules
get the fake library through `gpuops_fleet_environment`, and its vLLM server is the fake one, started with this
interpreter (which has setproctitle) and pointed at the host's state through `vllm_server_host_env`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from gpusim.spawn import FAKEVLLM_DIR, SIMULATOR_DIR, python3
from gpusim.devices import DEVICE_DIR_ENV
from gpusim.statedir import STATE_ENV, StateDir

GROUP = "vllm_servers"
SIM_LIB = SIMULATOR_DIR / "build" / "lib"


def host_vars(state: Path, port: int, **extra: Any) -> Dict[str, Any]:
    """The variables that make one simulated host a target of the role: its port, state, GPUs' library."""
    found: Dict[str, Any] = {
        "gpuops_fleet_environment": {"LD_LIBRARY_PATH": str(SIM_LIB), STATE_ENV: str(state),
                                     DEVICE_DIR_ENV: str(StateDir(state).dev)},
        "vllm_server_port": port,
        "vllm_server_state_dir": str(state / "role"),
        # the server's caches with the host's state, not in the machine's /var/cache
        "vllm_server_cache_dir": str(state / "caches"),
        "vllm_server_host_env": {STATE_ENV: str(state)},
    }
    found.update(extra)
    return found


def common_vars(python: Optional[str] = None) -> Dict[str, Any]:
    """Group variables for every simulated host: local connection, the fake vLLM, short timeouts."""
    interpreter = python or python3()
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": interpreter,
        "vllm_server_command": [interpreter, str(FAKEVLLM_DIR / "bin" / "vllm"), "serve"],
        "vllm_server_model": "zai-org/GLM-5-GGUF",
        # the role has no default size: one GPU unless a host says otherwise (its own size, or its vllm_server_gpus
        # with the size set to null)
        "vllm_server_tensor_parallel_size": 1,
        "vllm_server_launch_mode": "process",
        "vllm_server_ready_timeout": 60,
        "vllm_server_reclaim_grace": 2,
        "vllm_server_reclaim_timeout": 20,
        "vllm_server_stop_timeout": 10,
    }


def role_inventory(hosts: Mapping[str, Dict[str, Any]], python: Optional[str] = None, **group_vars: Any) -> Dict[str, Any]:
    """An inventory whose group vllm_servers holds the hosts (name -> host_vars())."""
    merged = common_vars(python)
    merged.update(group_vars)
    return {"all": {"vars": merged, "children": {GROUP: {"hosts": dict(hosts)}}}}


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpusim.inventory", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="inventory file to write (JSON, which Ansible reads as YAML)")
    parser.add_argument("--var", action="append", default=[], help="group variable KEY=JSON_OR_TEXT (repeatable)")
    parser.add_argument("--host-var", action="append", default=[],
                        help="host variable HOST.KEY=JSON_OR_TEXT, HOST named after its state directory (repeatable)")
    parser.add_argument("hosts", nargs="+", help="STATE_DIR:PORT; the host is named after STATE_DIR")
    args = parser.parse_args(argv)
    hosts: Dict[str, Dict[str, Any]] = {}
    for text in args.hosts:
        state, port = text.rpartition(":")[::2]
        if not state or not port.isdigit():
            parser.error("host %r: expected STATE_DIR:PORT" % text)
        path = Path(state).resolve()
        hosts[path.name] = host_vars(path, int(port))
    for item in args.host_var:
        target, value = item.partition("=")[::2]
        name, key = target.partition(".")[::2]
        if name not in hosts or not key:
            parser.error("--host-var %r: expected HOST.KEY=VALUE for one of %s" % (item, ", ".join(hosts)))
        hosts[name][key] = _value(value)
    group_vars = {}
    for item in args.var:
        key, value = item.partition("=")[::2]
        group_vars[key] = _value(value)
    Path(args.out).write_text(json.dumps(role_inventory(hosts, **group_vars), indent=2) + "\n", encoding="utf-8")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
