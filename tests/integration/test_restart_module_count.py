# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a restart costs the host in module executions and shows in task results, counted independently of the role.

The host's ansible_python_interpreter is bench/_host_python.py: it runs the real interpreter as a child and logs a line
per module execution, whatever the role says of itself. A forced restart_vllm.yml of one host makes at most 3 module
executions and shows at most 20 task results (the play recap's ok + skipped + failed, at most 3 of them skipped), each step
once by name; a rerun where nothing changes makes 1 and shows at most 8; both still end with a verified server (its own
workers hold its GPUs).
"""

from __future__ import annotations

import json
import re
import sys
import typing as t
from pathlib import Path

from ansible_run import ansible_env, BIN, recap, REPO, RESTART, run_playbook
from gpusim import inventory as sim_inventory
from gpusim.api import pid_alive, starttime
from inventories import inventory_for
from readings import assert_server_owns_gpus, environ


def _counting_python(tmp_path: Path) -> Path:
    path = tmp_path / "host-python"
    path.write_text("#!%s -S\n%s" % (sys.executable, (REPO / "bench" / "_host_python.py").read_text()))
    path.chmod(0o755)
    return path


def _modules(log: Path) -> t.List[str]:
    return [json.loads(line)["module"] for line in log.read_text().splitlines() if line.strip()]


def _results(output: str, host: str) -> int:
    counters = recap(output)[host]
    return counters["ok"] + counters["skipped"] + counters["failed"]


def _role_tasks(output: str) -> t.List[str]:
    return re.findall(r"^TASK \[gpuops\.fleet\.vllm_server : (.*?)\] \*", output, re.M)


def test_forced_restart_and_rerun_module_executions(fleet, tmp_path):
    (node,) = fleet("gpu-node-01")
    # a canary in the modules' environment: the launch's module run waits and checks with it, the server never gets it
    fleet_env = dict(sim_inventory.host_vars(node.state, node.port)["gpuops_fleet_environment"], GPUOPS_TEST_CANARY="modules-only")
    inventory = inventory_for(tmp_path, [node], {"gpu-node-01": {"vllm_server_tensor_parallel_size": 2,
                                                                 "gpuops_fleet_environment": fleet_env}},
                              ansible_python_interpreter=str(_counting_python(tmp_path)))
    log = tmp_path / "modules.jsonl"
    env = ansible_env(GPUOPS_BENCH_MODULE_LOG=str(log), GPUOPS_BENCH_REAL_PYTHON=str(BIN / "python3"))
    first = run_playbook(RESTART, inventory, env=env)
    assert first.returncode == 0, first.stdout[-4000:]
    first_server = assert_server_owns_gpus(node, [0, 1], 2)[0]

    log.write_text("")
    forced = run_playbook(RESTART, inventory, env=env)
    assert forced.returncode == 0, forced.stdout[-4000:]
    server, workers = assert_server_owns_gpus(node, [0, 1], 2)
    assert server != first_server and not pid_alive(first_server)
    ran = _modules(log)
    assert "?" not in ran, ran
    # the lock's run also makes the preflight's reading, the stop's also reclaims, and the launch's also waits for the
    # new server with the ready step's check, mark and release of the lock (the ready step judges that wait)
    assert len(ran) <= 3, "a forced restart made %d module executions: %s" % (len(ran), ran)
    assert fleet_env["LD_LIBRARY_PATH"] != environ(server).get("LD_LIBRARY_PATH")
    assert "GPUOPS_TEST_CANARY" not in environ(server) and "GPUOPS_TEST_CANARY" not in environ(workers[0])
    # every step still shows by name, with its own result
    for step in ("Lock the server for this run", "Look for holders that a stop would leave", "Stop the server",
                 "Reclaim the server's GPUs", "Every GPU of the server is free", "Launch the server",
                 "Wait for /health and the model on the server", "Check that the new server's own workers hold its GPUs",
                 "Release the server's lock", "Sum up this host"):
        assert any(name.startswith(step) for name in _role_tasks(forced.stdout)), step
    # each step once: no twin of a step for another launch mode or another merge of module runs
    names = _role_tasks(forced.stdout)
    assert len(names) == len(set(names)), names
    assert _results(forced.stdout, "gpu-node-01") <= 20, (recap(forced.stdout), names)
    # the error paths are decided in Python: a passing step is one task, never a skipped twin that would have failed it
    assert recap(forced.stdout)["gpu-node-01"]["skipped"] <= 3, (recap(forced.stdout), names)

    started = {pid: starttime(pid) for pid in [server, *workers]}
    log.write_text("")
    rerun = run_playbook(RESTART, inventory, "-e", "vllm_server_state=started", env=env)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert recap(rerun.stdout)["gpu-node-01"]["changed"] == 0
    assert all(pid_alive(pid, start) for pid, start in started.items())
    ran = _modules(log)
    assert len(ran) <= 1, "a rerun where nothing changes made %d module executions: %s" % (len(ran), ran)
    assert _results(rerun.stdout, "gpu-node-01") <= 8, (recap(rerun.stdout), _role_tasks(rerun.stdout))
    # the rerun took no lock, and the forced restart left none behind
    assert not list((node.state / "role").glob("*.lock"))
