# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An SSH fleet for the tests: gpusim.fleet nodes, readings taken inside each node, real ansible-playbook runs.

Every reading that judges an outcome is independent of the playbooks: the simulator's own state read by
`gpusim status` inside the node (so node PIDs mean what they mean there), the node's process table, and HTTP
requests from the machine to each node's address.
"""

from __future__ import annotations

import json
import re
import subprocess
import typing as t
import urllib.error
import urllib.request
from pathlib import Path

import ansible_run
from ansible_run import BIN, PLAYBOOKS, REPO, ansible_env, flat, recap  # noqa: F401  # pylint: disable=unused-import  # re-exported
from gpusim.api import SIM_BIN_DIR as SIM_BIN  # noqa: F401  # pylint: disable=unused-import  # re-exported
from gpusim.fleet import inventory, lifecycle
from inventories import ROLLING_AS_WRITTEN
from gpusim.fleet.record import FleetRecord, NodeRecord


class Fleet:
    """A started fleet (its record) with the readings the tests judge by."""

    def __init__(self, rec: FleetRecord) -> None:
        self.rec = rec

    @property
    def names(self) -> t.List[str]:
        return [node.name for node in self.rec.nodes]

    def node(self, name: str) -> NodeRecord:
        return self.rec.node(name)

    def gpusim(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = lifecycle.gpusim_on(self.rec, name, *args)
        if check and proc.returncode != 0:
            raise AssertionError("gpusim %s on %s failed (%d): %s %s" % (args, name, proc.returncode, proc.stdout, proc.stderr))
        return proc

    def gpusim_json(self, name: str, *args: str) -> t.Any:
        return json.loads(self.gpusim(name, *args).stdout)

    def status(self, name: str) -> t.Dict[str, t.Any]:
        """The simulator's own reading of the node's GPUs, taken inside the node."""
        return self.gpusim_json(name, "status", "--json")

    def holders(self, name: str) -> t.Dict[int, t.List[int]]:
        return {g["index"]: [h["pid"] for h in g["holders"]] for g in self.status(name)["gpus"]}

    def used(self, name: str) -> t.List[int]:
        return [g["used_mib"] for g in self.status(name)["gpus"]]

    def processes(self, name: str) -> t.Dict[int, str]:
        """PID -> command line of every process of the node, as the node itself numbers them."""
        proc = lifecycle.node_exec(self.rec, name, ["ps", "-e", "-ww", "-o", "pid=,args="])
        assert proc.returncode == 0, proc.stderr
        found = {}
        for line in proc.stdout.splitlines():
            pid, _space, args = line.strip().partition(" ")
            found[int(pid)] = args
        return found

    def tree(self, name: str) -> t.Dict[int, t.Tuple[int, str]]:
        """PID -> (parent PID, command line) of every process of the node."""
        proc = lifecycle.node_exec(self.rec, name, ["ps", "-e", "-ww", "-o", "pid=,ppid=,args="])
        assert proc.returncode == 0, proc.stderr
        found = {}
        for line in proc.stdout.splitlines():
            pid, ppid, args = (line.split(None, 2) + [""])[:3]
            found[int(pid)] = (int(ppid), args)
        return found

    def descends_from(self, name: str, pid: int, ancestor: int) -> bool:
        tree = self.tree(name)
        while pid in tree and pid > 1:
            pid = tree[pid][0]
            if pid == ancestor:
                return True
        return False

    def server_record(self, name: str, port: int = inventory.VLLM_PORT) -> t.Dict[str, t.Any]:
        """The role's record of the server it launched on the node (read only for the PID it names)."""
        return json.loads((self.node(name).path / "role" / ("vllm-%d.json" % port)).read_text())

    def incident(self, name: str, tp: int = 4, mib: int = 60000) -> t.Dict[str, t.Any]:
        """A vLLM-shaped tree on the node, then the incident's cleanup: API server and first worker SIGKILLed."""
        tree = self.gpusim_json(name, "vllm", "--tp", str(tp), "--mib", str(mib))
        self.gpusim(name, "incident")
        return tree

    def node_exec_out(self, name: str, argv: t.Sequence[str]) -> str:
        proc = lifecycle.node_exec(self.rec, name, list(argv))
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def health(self, name: str, port: int = inventory.VLLM_PORT, timeout: float = 2.0) -> int:
        """GET /health on the node's address, from the machine: the status, or -1 when nothing answers."""
        try:
            url = "http://%s:%d/health" % (self.node(name).node_ip, port)
            with urllib.request.urlopen(url, timeout=timeout) as reply:
                return reply.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return -1

    def node_env(self, name: str, host: bool = False) -> t.Dict[str, str]:
        """gpuops_fleet_environment of the node (host=True: vllm_server_host_env, the server's own)."""
        node = self.node(name)
        return inventory.node_vars(self.rec, node)["vllm_server_host_env" if host else "gpuops_fleet_environment"]

    def inventory(self, path: Path, **kwargs: t.Any) -> Path:
        """The fleet's inventory; its group variables are ROLLING_AS_WRITTEN (every node in one batch, never halted, as
        these tests were written) under the test's own ``group_vars``."""
        kwargs["group_vars"] = dict(ROLLING_AS_WRITTEN, **(kwargs.get("group_vars") or {}))
        return inventory.write(self.rec, path, **kwargs)


def run_playbook(playbook: str, inventory_path: Path, *extra: str, timeout: int = 400,
                 env: t.Optional[t.Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    """tests/support's runner, with the longer default timeout of a play over SSH."""
    return ansible_run.run_playbook(playbook, inventory_path, *extra, timeout=timeout, env=env)


def summary_lines(output: str, host: str) -> str:
    """Every line the summaries print about <host> (YAML single-quoted items that start with '<host>: '), joined.

    Only the summary tasks' own output is read (restart_vllm.yml's "One line per host" or gpu_cleanup.yml's
    "Summarise every host", up to the next task or the recap), so an apostrophe elsewhere (a task name such as
    "the server's GPUs") cannot shift the quotes."""
    sections = re.findall(r"TASK \[(?:One line per host|Summarise every host)[^\]]*\](.*?)(?=TASK \[|PLAY RECAP|$)", flat(output))
    items = [item.replace("''", "'") for section in sections for item in re.findall(r"'((?:[^']|'')*)'", section)]
    return " ".join(item for item in items if item.startswith(host + ": "))
