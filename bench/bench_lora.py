# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A LoRA adapter change without a restart, against a restart to the same adapter set, on one simulated host.

Two fake vLLM servers on the same simulated host (TP=1 each, GPU 0 and GPU 1), the same model, flags and start-up delay
(GPUOPS_SIM_STARTUP_DELAY_S, default 60 s: what a mid-size model with CUDA graphs takes to come up), each first launched
by a restart_vllm.yml run (not counted):
  - "runtime": started with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: a change of
    vllm_server_lora_adapters is loaded and unloaded through the server's API (no restart);
  - "restart": started with --enable-lora only, the adapters given as --lora-modules name=path at launch (what an
    operator without runtime updating does): the same change restarts the server.
Then, --runs times, in this order: a restart_vllm.yml run on the runtime server that changes nothing (its set again: the
floor of any run of the playbook), one that changes its adapter set (one adapter added, or removed again), and one that
makes the same change on the restart server. Each run's wall time and CPU
(user + sys of ansible-playbook and everything it waited for, os.wait4) are measured; the bench checks each outcome by
the fake's own reading (the runtime server keeps its PID and serves the new set; the restart server has a new PID that
serves it) and prints each run's ratio and the median. Target: the adapter change at most 0.05x the restart (wall).

    .venv/bin/python bench/run.py bench_lora [--runs 3] [--startup-delay 60] [--output DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

from _benchlib import REPO, BenchError, ensure_simulator, median, save_results, table
from gpusim import inventory as sim_inventory
from gpusim.api import free_port

RUNS = 3
STARTUP_DELAY_S = 60.0
MAX_RATIO = 0.05
BIN = Path(sys.executable).parent
SETS = (["sql"], ["sql", "chat"])  # each measured run goes from one to the other


def _env() -> Dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORKS="1",
                ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), PYTHONPATH=str(REPO / "simulator"),
                PATH="%s:%s" % (BIN, os.environ.get("PATH", "")), ANSIBLE_NOCOLOR="1")


def _gpusim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "gpusim", *args], env=_env(), check=True, capture_output=True)


def run_of(cmd: List[str], output: Path) -> Dict[str, float]:
    """Run ``cmd`` (its output to ``output``): its wall seconds, and the CPU seconds of it and every process it waited
    for. A command that fails is a BenchError."""
    with output.open("wb") as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise BenchError("%s failed:\n%s" % (" ".join(cmd[:4]), output.read_text()[-3000:]))
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as reply:  # nosec - loopback
        return json.loads(reply.read())


def _served(port: int) -> List[str]:
    return sorted(entry["id"] for entry in _get(port, "/v1/models")["data"] if entry.get("parent"))


def _pid(state: Path, name: str) -> int:
    return int(json.loads((state / "role" / ("%s.json" % name)).read_text())["pid"])


def measure(root: Path, runs: int, delay: float) -> Dict[str, Any]:
    state = root / "gpu-node-01"
    _gpusim("create", "--state", str(state))
    adapters = {}
    for name in ("sql", "chat"):
        (root / "adapters" / name).mkdir(parents=True, exist_ok=True)
        adapters[name] = str(root / "adapters" / name)
    try:
        sides = {}
        for side, gpu in (("runtime", 0), ("restart", 1)):
            port = free_port()
            env = {"GPUOPS_SIM_STARTUP_DELAY_S": str(delay)}
            if side == "runtime":
                env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
            host = sim_inventory.host_vars(state, port, vllm_server_gpus=[gpu], vllm_server_tensor_parallel_size=1,
                                           vllm_server_args=["--enable-lora", "--max-loras", "4"], vllm_server_env=env,
                                           vllm_server_ready_timeout=delay + 120, vllm_server_name="lora-%s" % side)
            inventory = root / ("inventory-%s.json" % side)
            inventory.write_text(json.dumps(sim_inventory.role_inventory({state.name: host}, python=str(BIN / "python3"))))
            sides[side] = {"port": port, "inventory": inventory}

        def play(side: str, wanted: List[str], label: str) -> Dict[str, float]:
            extra = json.dumps({"vllm_server_lora_adapters": [{"name": name, "path": adapters[name]} for name in wanted]})
            return run_of([str(BIN / "ansible-playbook"), "-i", str(sides[side]["inventory"]),
                           str(REPO / "playbooks" / "restart_vllm.yml"), "-e", extra], root / ("%s-%s.txt" % (side, label)))

        for side in sides:  # each server's first launch, with the first set: not counted
            play(side, SETS[0], "first")
        measured = []
        for number in range(1, runs + 1):
            wanted = SETS[number % 2]
            row: Dict[str, Any] = {"run": number, "adapters": wanted,
                                   "unchanged": play("runtime", SETS[(number + 1) % 2], "%d-unchanged" % number)}
            for side in ("runtime", "restart"):
                before = _pid(state, "lora-%s" % side)
                row[side] = play(side, wanted, str(number))
                after = _pid(state, "lora-%s" % side)
                if _served(sides[side]["port"]) != sorted(wanted):
                    raise BenchError("the %s server serves %s, not %s" % (side, _served(sides[side]["port"]), sorted(wanted)))
                if (after == before) != (side == "runtime"):
                    raise BenchError("the %s server's PID went from %d to %d" % (side, before, after))
            row["ratio"] = row["runtime"]["wall_s"] / row["restart"]["wall_s"]
            measured.append(row)
        return {"startup_delay_s": delay, "runs": measured, "load": os.getloadavg(),
                "ratio": median([row["ratio"] for row in measured]),
                "runtime_wall_s": median([row["runtime"]["wall_s"] for row in measured]),
                "unchanged_wall_s": median([row["unchanged"]["wall_s"] for row in measured]),
                "restart_wall_s": median([row["restart"]["wall_s"] for row in measured])}
    finally:
        _gpusim("cleanup", "--state", str(state))


def report(result: Dict[str, Any], commit: str) -> List[str]:
    head = (result["startup_delay_s"], len(result["runs"]), commit) + tuple(result["load"]) + (time.strftime("%Y-%m-%d %H:%M"),)
    out = ["an adapter change against a restart to the same adapter set, 1 simulated host, TP=1, "
           "GPUOPS_SIM_STARTUP_DELAY_S=%g, %d runs, commit %s, load %.2f %.2f %.2f at the end, %s" % head]
    rows = [[row["run"], ",".join(row["adapters"]), "%.2f" % row["unchanged"]["wall_s"], "%.2f" % row["unchanged"]["cpu_s"],
             "%.2f" % row["runtime"]["wall_s"], "%.2f" % row["runtime"]["cpu_s"],
             "%.1f" % row["restart"]["wall_s"], "%.2f" % row["restart"]["cpu_s"], "%.3f" % row["ratio"]] for row in result["runs"]]
    out.append(table(["run", "adapters after", "no change wall s", "no change CPU s", "change wall s", "change CPU s",
                      "restart wall s", "restart CPU s",
                      "change / restart wall"], rows))
    verdict = ("PASS" if result["ratio"] <= MAX_RATIO else "FAIL", result["ratio"], len(result["runs"]),
               result["runtime_wall_s"], result["restart_wall_s"], MAX_RATIO)
    out.append("%s wall of an adapter change / wall of a restart to the same set: %.3fx median of %d runs "
               "(medians %.2f s / %.1f s; target <= %.2fx)" % verdict)
    out.append("a run that changes nothing: %.2f s (median); the adapter change: %+.2f s above it"
               % (result["unchanged_wall_s"], result["runtime_wall_s"] - result["unchanged_wall_s"]))
    return out


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def _exit_on_term(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="adapter change + restart pairs; the median ratio counts")
    parser.add_argument("--startup-delay", type=float, default=STARTUP_DELAY_S,
                        help="the fake servers' GPUOPS_SIM_STARTUP_DELAY_S (seconds)")
    parser.add_argument("--output", type=Path, help="keep every command's output here")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.startup_delay < 0:
        parser.error("--startup-delay must be 0 or more seconds")
    # a SIGTERM (timeout, a CI step ending) still ends the fake servers: measure()'s finally runs on SystemExit
    signal.signal(signal.SIGTERM, _exit_on_term)
    ensure_simulator()
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
        root = args.output or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        try:
            result = measure(root, args.runs, args.startup_delay)
        except BenchError as error:
            print("bench_lora: %s" % error, file=sys.stderr)
            return 1
    result["commit"] = _commit()
    print("\n".join(report(result, result["commit"])))
    save_results("bench_lora", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
