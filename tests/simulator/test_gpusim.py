# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scenario command line (gpusim) and the fake vLLM, checked through the REAL nvidia-ml-py."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest
import gpusim.api
from gpusim_helpers import GRACE_S, SimHost, cmdline, free_port, is_running, ppid, proc_state, read_proc, sim_host, wait_for

INCIDENT_MIB = 93029
TOTAL_MIB = 97887
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15


def holders(gpu: Dict[str, Any]) -> List[int]:
    return [process["pid"] for process in gpu["processes"]]


def title(pid: int) -> str:
    return " ".join(cmdline(pid))


def test_create_writes_a_host_nvml_can_read(simhost: SimHost, tmp_path: Path) -> None:
    host = dict(line.split("=", 1) for line in (simhost.state / "host").read_text().split())
    assert host == {"driver_loaded": "1", "driver_version": "580.95.05", "nvml_version": "13.580.95.05",
                    "cuda_driver_version": "13000", "topology": "pcie", "mig_supported": "0",
                    "pid_namespace": str(os.stat("/proc/self/ns/pid").st_ino)}  # the creator's: NVML reports its PIDs
    rows = [line.split("\t") for line in (simhost.state / "gpus").read_text().splitlines()
            if not line.startswith("#")]
    assert [int(row[0]) for row in rows] == list(range(8))
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", row[1]) for row in rows)
    buses = [row[2] for row in rows]
    assert all(re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", bus) for bus in buses)
    assert buses == sorted(buses) and len(set(buses)) == 8
    assert {tuple(row[3:]) for row in rows} == {
        ("97887", "512", "0", "0", "NVIDIA RTX PRO 6000 Blackwell Server Edition")}
    gpus = simhost.nvml_gpus()
    assert [gpu["uuid"] for gpu in gpus] == [row[1] for row in rows]
    assert {(gpu["total_mib"], gpu["used_mib"], gpu["reserved_mib"], gpu["v1_used_mib"]) for gpu in gpus} == {
        (TOTAL_MIB, 0, 512, 512)}

    other = sim_host(tmp_path / "other-host")
    other.gpusim("create", "--gpus", "2", "--topology", "nvlink")
    other_uuids = [gpu["uuid"] for gpu in other.nvml_gpus()]
    assert len(other_uuids) == 2 and not set(other_uuids) & {row[1] for row in rows}
    assert simhost.gpusim("create", check=False).returncode == 1  # refuses to overwrite
    simhost.gpusim("create", "--force")
    assert [gpu["uuid"] for gpu in simhost.nvml_gpus()] == [row[1] for row in rows]  # deterministic


def test_incident_replayed(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--gpus", "0-7", "--mib", str(INCIDENT_MIB))
    parent, workers = tree["parent"], tree["workers"]
    assert tree["engine_core"] is None and tree["gpus"] == list(range(8))
    gpus = simhost.nvml_gpus()
    assert [gpu["used_mib"] for gpu in gpus] == [INCIDENT_MIB] * 8
    assert [holders(gpu) for gpu in gpus] == [[pid] for pid in workers]
    assert [title(pid) for pid in workers] == [f"VLLM::Worker_TP{rank}" for rank in range(8)]
    assert {read_proc(pid, "comm") for pid in workers} == {"VLLM::Worker_TP\n"}
    assert "vllm.entrypoints" in title(parent)  # what `pkill -f vllm.entrypoints` matched
    assert not any("vllm.entrypoints" in title(pid) for pid in workers)  # ... and what it missed

    output = simhost.gpusim("incident").stdout
    assert f"killed pid {parent} (api_server" in output and f"killed pid {workers[0]} (worker" in output
    assert wait_for(lambda: not is_running(parent) and not is_running(workers[0]))
    gpus = simhost.nvml_gpus()
    assert gpus[0]["used_mib"] == 0 and gpus[0]["processes"] == []
    assert [gpu["used_mib"] for gpu in gpus[1:]] == [INCIDENT_MIB] * 7
    survivors = [pid for gpu in gpus[1:] for pid in holders(gpu)]
    assert [title(pid) for pid in survivors] == [f"VLLM::Worker_TP{rank}" for rank in range(1, 8)]
    assert all(ppid(pid) == tree["reaper"] for pid in survivors)  # reparented, not ended

    for pid in survivors:  # what the operator finally did: kill every worker
        simhost.kill(pid)
    assert wait_for(lambda: all(gpu["used_mib"] == 0 and not gpu["processes"] for gpu in simhost.nvml_gpus()))
    assert "removed 8 dead allocation record(s)" in simhost.gpusim("gc").stdout
    assert list((simhost.state / "allocs").iterdir()) == []


def test_serve_entrypoint_keeps_vllms_command_line(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--tp", "2", "--first-gpu", "3", "--entrypoint", "serve", "--model", "m/x")
    argv = cmdline(tree["parent"])
    assert Path(argv[1]).name == "vllm" and argv[2:] == ["serve", "m/x", "--tensor-parallel-size", "2"]
    assert tree["gpus"] == [3, 4]
    used = [gpu["used_mib"] for gpu in simhost.nvml_gpus()]
    assert used == [0, 0, 0, INCIDENT_MIB, INCIDENT_MIB, 0, 0, 0]


def test_api_server_command_line(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--gpus", "0-1", "--model", "org/model")
    argv = cmdline(tree["parent"])
    assert Path(argv[0]).name.startswith("python")
    assert argv[1:] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "org/model",
                        "--tensor-parallel-size", "2"]
    assert all(ppid(pid) == tree["parent"] for pid in tree["workers"])


def test_v1_tree_with_engine_core(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--gpus", "0-3", "--engine-core")
    core = tree["engine_core"]
    assert title(core) == "VLLM::EngineCore" and read_proc(core, "comm") == "VLLM::EngineCor\n"
    assert ppid(core) == tree["parent"]
    assert [ppid(pid) for pid in tree["workers"]] == [core] * 4
    assert [title(pid) for pid in tree["workers"]] == [f"VLLM::Worker_TP{rank}" for rank in range(4)]
    roles = {record.pid: record.role for record in simhost.records()}
    assert [roles[tree["parent"]], roles[core]] == ["api_server", "engine_core"]
    assert {roles[pid] for pid in tree["workers"]} == {"worker"}


def test_parent_sigterm_ends_the_tree_at_once(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--gpus", "0-7", "--engine-core")
    everyone = [tree["parent"], tree["engine_core"], *tree["workers"]]
    simhost.kill(tree["parent"], signal.SIGTERM)
    assert wait_for(lambda: not any(is_running(pid) for pid in everyone))
    # workers that obey SIGTERM end on it: the server never needed its SIGKILL after the grace (its log says
    # when it does; no wall-clock bound, which a loaded machine could break)
    assert "sending SIGKILL" not in Path(tree["log"]).read_text()
    assert all(gpu["used_mib"] == 0 for gpu in simhost.nvml_gpus())


def test_workers_ignoring_sigterm_are_killed_after_the_grace(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--gpus", "0-3", "--ignore-sigterm")
    for pid in tree["workers"]:
        simhost.kill(pid, signal.SIGTERM)
    time.sleep(0.3)
    assert all(is_running(pid) for pid in tree["workers"])
    assert [gpu["used_mib"] for gpu in simhost.nvml_gpus()[:4]] == [INCIDENT_MIB] * 4

    started = time.monotonic()
    simhost.kill(tree["parent"], signal.SIGTERM)
    assert wait_for(lambda: not any(is_running(pid) for pid in [tree["parent"], *tree["workers"]]))
    assert time.monotonic() - started >= GRACE_S  # not before the grace (a lower bound: load cannot break it)
    assert "4 process(es) still alive after" in Path(tree["log"]).read_text()  # then the SIGKILL
    assert all(gpu["used_mib"] == 0 for gpu in simhost.nvml_gpus())


def test_workers_survive_a_sigkilled_parent(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--gpus", "0-7", "--engine-core")
    simhost.kill(tree["parent"])
    assert wait_for(lambda: not is_running(tree["parent"]))
    time.sleep(0.3)
    assert is_running(tree["engine_core"]) and all(is_running(pid) for pid in tree["workers"])
    assert ppid(tree["engine_core"]) == tree["reaper"]
    gpus = simhost.nvml_gpus()
    assert [gpu["used_mib"] for gpu in gpus] == [INCIDENT_MIB] * 8
    assert [holders(gpu) for gpu in gpus] == [[pid] for pid in tree["workers"]]


def test_stuck_zombie_keeps_its_memory_until_cleanup(simhost: SimHost) -> None:
    stuck = simhost.gpusim_json("stuck", "--gpu", "3", "--mib", "4096")
    keeper, holder = stuck["keeper"], stuck["holder"]
    assert ppid(holder) == keeper
    assert not re.search(r"vllm|ray|torchrun|sglang", title(keeper), re.IGNORECASE)
    simhost.kill(holder, signal.SIGTERM)
    assert wait_for(lambda: proc_state(holder) == "Z")
    simhost.kill(holder, signal.SIGKILL)  # nothing ends a zombie
    time.sleep(0.2)
    gpu = simhost.nvml_gpus()[3]
    assert proc_state(holder) == "Z" and gpu["used_mib"] == 4096 and holders(gpu) == [holder]

    simhost.gpusim("cleanup")
    assert not is_running(keeper) and proc_state(holder) is None  # reaped at last
    assert simhost.nvml_gpus()[3]["used_mib"] == 0


def test_lost_gpu(simhost: SimHost) -> None:
    simhost.gpusim("lose-gpu", "--gpu", "2")
    gpus = simhost.nvml_gpus()
    assert gpus[2] == {"index": 2, "error": NVML_ERROR_GPU_IS_LOST}
    assert all("error" not in gpu for index, gpu in enumerate(gpus) if index != 2)
    failed = simhost.gpusim("vllm", "--gpus", "2", check=False)  # CUDA cannot use it either
    assert failed.returncode == 1 and "GPU is lost" in failed.stderr
    simhost.gpusim("restore-gpu", "--gpu", "2")
    assert "error" not in simhost.nvml_gpus()[2]


def test_foreign_pid(simhost: SimHost) -> None:
    foreign = simhost.gpusim_json("foreign", "--gpu", "1", "--mib", "2048")
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert foreign["pid"] > pid_max and not Path(f"/proc/{foreign['pid']}").exists()
    not_available = simhost.gpusim_json("foreign", "--gpu", "1", "--mib", "1024", "--na")
    gpu = simhost.nvml_gpus()[1]
    assert gpu["used_mib"] == 3072
    assert gpu["processes"] == [{"pid": foreign["pid"], "used_mib": 2048},
                                {"pid": not_available["pid"], "used_mib": None}]
    existing = simhost.gpusim("foreign", "--gpu", "1", "--mib", "1", "--pid", "1", check=False)
    assert existing.returncode == 1 and "exists in this PID namespace" in existing.stderr


def test_orphan_memory(simhost: SimHost) -> None:
    simhost.gpusim("orphan", "--gpu", "5", "--mib", "1500")
    gpu = simhost.nvml_gpus()[5]
    assert (gpu["used_mib"], gpu["v1_used_mib"], gpu["processes"]) == (1500, 2012, [])
    simhost.gpusim("orphan", "--gpu", "5", "--mib", "0")
    assert simhost.nvml_gpus()[5]["used_mib"] == 0


def test_driver_unload(simhost: SimHost) -> None:
    simhost.gpusim("driver", "--unload")
    assert simhost.nvml() == {"init_error": NVML_ERROR_DRIVER_NOT_LOADED}
    failed = simhost.gpusim("vllm", "--gpus", "0", check=False)
    assert failed.returncode == 1 and "Found no NVIDIA driver" in failed.stderr
    simhost.gpusim("driver", "--load")
    assert len(simhost.nvml_gpus()) == 8


def test_two_servers_tp4(simhost: SimHost) -> None:
    first = simhost.gpusim_json("vllm", "--gpus", "0-3")
    second = simhost.gpusim_json("vllm", "--tp", "4", "--first-gpu", "4")
    gpus = simhost.nvml_gpus()
    assert [holders(gpu) for gpu in gpus] == [[pid] for pid in first["workers"] + second["workers"]]
    assert [title(pid) for pid in second["workers"]] == [f"VLLM::Worker_TP{rank}" for rank in range(4)]

    clash = simhost.gpusim("vllm", "--gpus", "3-4", check=False)  # like vLLM: the memory is taken
    # both workers find their GPU taken; whichever fails first is reported (it raced once in CI)
    assert clash.returncode == 1 and re.search(r"Free memory on device cuda:[01]\b", clash.stderr), clash.stderr
    running = {record.pid for record in simhost.records() if is_running(record.pid)}
    assert running - {first["reaper"], second["reaper"]} == {
        first["parent"], second["parent"], *first["workers"], *second["workers"]}

    simhost.kill(first["parent"], signal.SIGTERM)
    assert wait_for(lambda: not any(is_running(pid) for pid in first["workers"]))
    assert [gpu["used_mib"] for gpu in simhost.nvml_gpus()] == [0] * 4 + [INCIDENT_MIB] * 4


def test_health_endpoint(simhost: SimHost) -> None:
    port = free_port()
    simhost.gpusim_json("vllm", "--gpus", "0-1", "--port", str(port), "--model", "m")
    assert wait_for(lambda: _health(port) == 200)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as response:
        assert json.load(response)["data"][0]["id"] == "m"


def _health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return int(response.status)
    except OSError:
        return 0


def test_status_output(simhost: SimHost) -> None:
    tree = simhost.gpusim_json("vllm", "--gpus", "0-1", "--mib", str(INCIDENT_MIB))
    simhost.gpusim("orphan", "--gpu", "7", "--mib", "300")
    text = simhost.gpusim("status").stdout
    assert "GPU 0 00000000:" in text and f"{INCIDENT_MIB} / {TOTAL_MIB} MiB used" in text
    assert re.search(rf"pid +{tree['workers'][1]} S +{INCIDENT_MIB} MiB +VLLM::Worker_TP1", text)
    assert "300 MiB held by no process" in text
    status = json.loads(simhost.gpusim("status", "--json").stdout)
    assert [gpu["used_mib"] for gpu in status["gpus"]] == [INCIDENT_MIB] * 2 + [0] * 5 + [300]
    assert status["gpus"][0]["holders"] == [
        {"pid": tree["workers"][0], "title": "VLLM::Worker_TP0", "state": "S", "used_mib": INCIDENT_MIB, "flags": []}]
    roles = {process["pid"]: process["role"] for process in status["processes"]}
    assert roles[tree["parent"]] == "api_server" and roles[tree["reaper"]] == "reaper"


def test_env_points_nvml_at_the_host(simhost: SimHost) -> None:
    lines = simhost.gpusim("env").stdout
    script = lines + 'printf "%s\\n" "$GPUOPS_SIM_STATE" "${LD_LIBRARY_PATH%%:*}" "$(command -v nvidia-smi)"'
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(["bash", "-c", script], env=env, text=True, capture_output=True, check=True).stdout
    build = Path(__file__).resolve().parents[2] / "simulator" / "build"
    assert out.splitlines() == [str(simhost.state), str(build / "lib"), str(build / "bin" / "nvidia-smi")]


def test_cleanup_ends_every_recorded_process_and_nothing_else(simhost: SimHost) -> None:
    with subprocess.Popen(["sleep", "60"]) as canary:  # not recorded: cleanup must leave it alone
        try:
            simhost.gpusim_json("vllm", "--gpus", "0-3", "--engine-core", "--ignore-sigterm")
            survivor_tree = simhost.gpusim_json("vllm", "--gpus", "4-6")
            simhost.kill(survivor_tree["parent"])
            simhost.gpusim_json("stuck", "--gpu", "7", "--mib", "100")
            recorded = simhost.records()
            assert len(recorded) >= 3 + 4 + 1 + 3 + 1 + 2  # servers, workers, core, keeper+holder, reapers

            result = json.loads(simhost.gpusim("cleanup").stdout)
            assert result["left"] == [] and result["killed"]
            assert not any(is_running(record.pid) for record in recorded)
            assert canary.poll() is None
            assert list((simhost.state / "procs").iterdir()) == []
            assert list((simhost.state / "allocs").iterdir()) == []
            assert all(gpu["used_mib"] == 0 and not gpu["processes"] for gpu in simhost.nvml_gpus())
        finally:
            canary.kill()
    simhost.gpusim("cleanup", "--remove")
    assert not simhost.state.exists()


def test_state_option_before_or_after_the_command(tmp_path: Path) -> None:
    env = {key: value for key, value in sim_host(tmp_path).process_env().items() if key != "GPUOPS_SIM_STATE"}
    state = tmp_path / "explicit"

    def gpusim(*args: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run([sys.executable, "-m", "gpusim", *args], env=env, text=True, capture_output=True,
                              check=False)

    assert gpusim("--state", str(state), "create", "--gpus", "2").returncode == 0
    assert "GPU 1 " in gpusim("status", "--state", str(state)).stdout
    missing = gpusim("status")
    assert missing.returncode == 1 and "pass --state DIR or set GPUOPS_SIM_STATE" in missing.stderr


def test_workers_start_untitled_through_spawn_main(simhost: SimHost) -> None:
    """GPUOPS_SIM_WORKER_SPAWN_S: workers run under multiprocessing's spawn command line, holding a CUDA context, then
    take their title and their memory, as vLLM's spawned workers do."""
    tree = simhost.spawn_vllm(2, mib=20000, env={"GPUOPS_SIM_WORKER_SPAWN_S": "2", "GPUOPS_SIM_WORKER_SPAWN_MIB": "500"})
    early = [title(pid) for pid in tree["workers"]]
    assert all(re.fullmatch(r"\S*python3? (-\S+ )*-c from multiprocessing\.spawn import spawn_main; "
                            r"spawn_main\(tracker_fd=\d+, pipe_handle=\d+\) --multiprocessing-fork", t) for t in early), early
    assert [gpu["used_mib"] for gpu in simhost.nvml_gpus()[:2]] == [500, 500]
    assert {record.role for record in simhost.records() if record.pid in tree["workers"]} == {"worker"}
    assert wait_for(lambda: [title(pid) for pid in tree["workers"]] == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"], 20)
    assert wait_for(lambda: simhost.used_mib()[:2] == [20000, 20000])
    assert [holders(gpu) for gpu in simhost.nvml_gpus()[:2]] == [[pid] for pid in tree["workers"]]
    simhost.kill(tree["parent"], signal.SIGTERM)
    assert wait_for(lambda: not any(is_running(pid) for pid in [tree["parent"], *tree["workers"]]), 20)
    assert simhost.used_mib() == [0] * 8


@pytest.mark.parametrize("detach", [False, True])
def test_respawning_node_forks_a_holder_as_it_ends(simhost: SimHost, detach: bool) -> None:
    """`respawn`: on SIGTERM the node forks the process that takes its GPU `delay` s later, then exits. Without
    `detach` that process stays in the node's process group and session; with it, it is a daemon in a session of its
    own, in no group of the tree, whose parent is gone: the reaper above the tree adopted it."""
    root = {"key": "worker", "title": "python3 /opt/jobs/worker.py --rank 0", "hold": [{"gpu": 0, "mib": 40000}],
            "respawn": {"delay": 0.3, "detach": detach}}
    worker = simhost.gpusim_json("tree", "--spec", json.dumps(root))["worker"]
    reaper, group, session = ppid(worker), os.getpgid(worker), os.getsid(worker)
    assert [holders(gpu) for gpu in simhost.nvml_gpus()[:1]] == [[worker]]
    simhost.kill(worker, signal.SIGTERM)

    def respawned() -> List[int]:
        return [record.pid for record in simhost.records() if record.role == "tree_respawned" and is_running(record.pid)]

    assert wait_for(lambda: len(respawned()) == 1 and not is_running(worker)), (respawned(), proc_state(worker))
    child = respawned()[0]
    assert child != worker and title(child) == root["title"]
    assert wait_for(lambda: simhost.used_mib()[0] == 40000 and simhost.holders(0) == [child]), simhost.status()
    if detach:
        assert os.getsid(child) not in (session, child) and os.getpgid(child) == os.getsid(child), "a daemon, not a leader"
        assert os.getpgid(child) != group and ppid(child) == reaper
    else:
        assert (os.getpgid(child), os.getsid(child)) == (group, session)


def test_free_port_hands_out_ports_of_this_workers_block_skipping_a_taken_one(monkeypatch):
    """free_port(): below the kernel's ephemeral range, in the xdist worker's own block, never the same twice in a row,
    and never a port something is bound to."""
    api = gpusim.api
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setattr(api, "_next_port", [])
    low = api.PORT_BASE + 3 * api.PORT_BLOCK
    first = api.free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first + 1 if first + 1 < low + api.PORT_BLOCK else low))
        second = api.free_port()
        assert second != taken.getsockname()[1]
    assert low <= first < low + api.PORT_BLOCK and low <= second < low + api.PORT_BLOCK and second != first
    assert second < 32768, "below the kernel's ephemeral ports"
