# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CPU of a forced restart_vllm.yml on one simulated host, against one `ansible -m ping` to it in the same run.

One simulated host (tensor parallel 2) first gets a managed server (a restart_vllm.yml run, not counted). Then, --runs
times, in this order: `ansible -m ansible.builtin.ping` to the host, and a forced restart
(`-e vllm_server_state=restarted`). Each command's CPU is user + sys of the command and every process it waited for, from
os.wait4() on it: the controller (ansible-playbook or ansible, its forks) and the simulated host's side (the modules,
which run as the controller's children on a local connection) together; the fake vLLM server the role starts is not
its child and is not counted. Each run's ratio is the restart's CPU over the ping's of the same run (measured side by
side, under the same load); the bench prints the median ratio and the median of each side. Target: at most 4x.

Only the playbook, the gpusim simulator and its inventory helper are used, so it runs against any checkout of the
collection (before or after a refactoring of the role).

    .venv/bin/python bench/run.py bench_restart_cpu [--runs 3] [--output DIR]
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
from pathlib import Path
from typing import Any, Dict, List, Optional

from _benchlib import REPO, BenchError, ensure_simulator, median, save_results, table
from gpusim import inventory as sim_inventory
from gpusim.api import free_port

TP = 2
RUNS = 3
MAX_RATIO = 4.0
BIN = Path(sys.executable).parent


def _env() -> Dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORKS="1",
                ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), PYTHONPATH=str(REPO / "simulator"),
                PATH="%s:%s" % (BIN, os.environ.get("PATH", "")), ANSIBLE_NOCOLOR="1")


def _gpusim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "gpusim", *args], env=_env(), check=True, capture_output=True)


def cpu_of(cmd: List[str], output: Path) -> Dict[str, float]:
    """Run ``cmd`` (its output to ``output``): user and sys CPU seconds of it and every process it waited for, and its
    wall seconds. A command that fails is a BenchError."""
    with output.open("wb") as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise BenchError("%s exited %d:\n%s" % (" ".join(cmd[:4]), proc.returncode, output.read_text()[-3000:]))
    return {"user_s": usage.ru_utime, "sys_s": usage.ru_stime, "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall}


def measure(root: Path, runs: int) -> Dict[str, Any]:
    state = root / "gpu-node-01"
    _gpusim("create", "--state", str(state))
    try:
        host = sim_inventory.host_vars(state, free_port(), vllm_server_tensor_parallel_size=TP)
        inventory = root / "inventory.json"
        inventory.write_text(json.dumps(sim_inventory.role_inventory({state.name: host}, python=str(BIN / "python3"))))
        restart = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / "restart_vllm.yml"),
                   "-e", "vllm_server_state=restarted"]
        ping = [str(BIN / "ansible"), "-i", str(inventory), state.name, "-m", "ansible.builtin.ping"]
        cpu_of(restart, root / "first-restart.txt")  # the host's first server: each counted restart replaces one
        measured = []
        for number in range(1, runs + 1):
            pinged = cpu_of(ping, root / ("ping-%d.txt" % number))
            restarted = cpu_of(restart, root / ("restart-%d.txt" % number))
            measured.append({"run": number, "ping": pinged, "restart": restarted,
                             "ratio": restarted["cpu_s"] / pinged["cpu_s"]})
        return {"tensor_parallel": TP, "runs": measured, "load": os.getloadavg(),
                "ratio": median([run["ratio"] for run in measured]),
                "ping_cpu_s": median([run["ping"]["cpu_s"] for run in measured]),
                "restart_cpu_s": median([run["restart"]["cpu_s"] for run in measured])}
    finally:
        _gpusim("cleanup", "--state", str(state))


def report(result: Dict[str, Any], commit: str) -> List[str]:
    head = (result["tensor_parallel"], len(result["runs"]), commit) + tuple(result["load"]) + (time.strftime("%Y-%m-%d %H:%M"),)
    out = ["forced restart_vllm.yml of 1 simulated host (TP=%d) against ansible -m ping, %d runs, commit %s, "
           "load %.2f %.2f %.2f at the end, %s" % head]
    rows = [[run["run"], "%.2f" % run["ping"]["cpu_s"], "%.2f" % run["ping"]["wall_s"], "%.2f" % run["restart"]["cpu_s"],
             "%.2f" % run["restart"]["user_s"], "%.2f" % run["restart"]["sys_s"], "%.1f" % run["restart"]["wall_s"],
             "%.1f" % run["ratio"]] for run in result["runs"]]
    out.append(table(["run", "ping CPU s", "ping wall s", "restart CPU s", "user s", "sys s", "restart wall s",
                      "restart / ping CPU"], rows))
    ratio = result["ratio"]
    verdict = ("PASS" if ratio <= MAX_RATIO else "FAIL", ratio, len(result["runs"]), result["restart_cpu_s"], result["ping_cpu_s"],
               MAX_RATIO)
    out.append("%s CPU of a forced restart of 1 host / CPU of ansible -m ping: %.1fx median of %d runs "
               "(medians %.2f s / %.2f s; target <= %.0fx)" % verdict)
    return out


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "unknown"


def _exit_on_term(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="ping + forced restart pairs; the median ratio counts")
    parser.add_argument("--output", type=Path, help="keep every command's output here (ping-N.txt, restart-N.txt)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    # a SIGTERM (timeout, a CI step ending) still ends the fake server: measure()'s finally runs on SystemExit
    signal.signal(signal.SIGTERM, _exit_on_term)
    ensure_simulator()
    with tempfile.TemporaryDirectory(prefix="bench-restart-cpu-") as tmp:
        root = args.output or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        try:
            result = measure(root, args.runs)
        except BenchError as error:
            print("bench_restart_cpu: %s" % error, file=sys.stderr)
            return 1
    result["commit"] = _commit()
    print("\n".join(report(result, result["commit"])))
    save_results("bench_restart_cpu", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
