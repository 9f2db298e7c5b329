# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one inventory builder of the suites: local-connection inventories of simulated GPU hosts, for the modules
(`write_inventory`) and for the role (`role_host_vars`, `write_role_inventory`, `inventory_for`), over gpusim's own
role_host_vars and role_inventory (gpusim.api).
"""

from __future__ import annotations

import json
import sys
import typing as t
from pathlib import Path

from ansible_run import BIN
from gpusim.api import role_host_vars as sim_host_vars, role_inventory

if t.TYPE_CHECKING:
    from simhost import SimHost

__all__ = ["write_inventory", "role_host_vars", "write_role_inventory", "inventory_for"]


def write_inventory(path: Path, hosts: t.Sequence["SimHost"], **group_vars: t.Any) -> Path:
    """A YAML (here: JSON) inventory of local-connection hosts, one per simulated GPU host, in the group vllm_servers (the
    host pattern every playbook that concerns servers or their GPUs defaults to)."""
    inventory = {
        "all": {
            "vars": dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **group_vars),
            "children": {"vllm_servers": {"hosts": {h.name: {"gpuops_fleet_environment": h.environment()} for h in hosts}}},
        }
    }
    path.write_text(json.dumps(inventory, indent=2))
    return path


def role_host_vars(host: "SimHost", port: int, **extra: t.Any) -> t.Dict[str, t.Any]:
    """The role's variables for one simulated host: its own port, state directory and simulated GPUs."""
    return sim_host_vars(host.state, port, **extra)


# restart_vllm.yml as the suites were written for it: every host in one batch, never halted, every server restarted
# (forced). Its defaults are now one host first, then at most 25 %, halting at the first failed batch, and converging
# (vllm_server_state=started: only a server that drifted or is not healthy is restarted). A test's own group variables
# win (a host's own vllm_server_state, and -e, win over a group's), and a test of the defaults passes None for each
# (left out of the inventory).
ROLLING_AS_WRITTEN = {"vllm_restart_serial": "100%", "vllm_restart_max_fail_percentage": 100, "vllm_server_state": "restarted"}


def write_role_inventory(path: Path, hosts: t.Mapping[str, t.Dict[str, t.Any]], **group_vars: t.Any) -> Path:
    """An inventory whose group vllm_servers holds the given hosts (name -> host vars), driving the fake vLLM; the group
    variables are ROLLING_AS_WRITTEN under ``group_vars`` (a None value leaves the variable out)."""
    merged = dict(ROLLING_AS_WRITTEN, **group_vars)
    merged = {name: value for name, value in merged.items() if value is not None}
    path.write_text(json.dumps(role_inventory(hosts, python=str(BIN / "python3"), **merged), indent=2))
    return path


def inventory_for(tmp_path: Path, hosts: t.Sequence["SimHost"], per_host: t.Optional[t.Mapping[str, t.Dict[str, t.Any]]] = None,
                  **group_vars: t.Any) -> Path:
    """tmp_path/inventory.json for the role: each host's own port and state, its `per_host` variables, `group_vars`."""
    entries = {h.name: role_host_vars(h, h.port, **(per_host or {}).get(h.name, {})) for h in hosts}
    return write_role_inventory(tmp_path / "inventory.json", entries, **group_vars)
