# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks over SSH at growing fleet sizes, against Ansible's own floor measured in the same run.

One gpusim.fleet of 16 nodes (root: network and PID namespaces). For N = 1, 2, 4, 8, 16 nodes (an inventory of
the first N), with the default forks (5) and with forks = N (the same run when N <= 5): wall time of
`ansible -m ping` (the floor: connect, run one trivial module, return), gpu_facts.yml, gpu_cleanup.yml (idle GPUs:
read, nothing to end, verify) and a forced restart_vllm.yml (drain, stop, reclaim, verify, launch, ready, check).
The per-host marginal cost is the least-squares slope of wall time over N with forks = N; the ratio to ping's
slope is the figure. Then gpu_facts.yml on 4 nodes with pipelining and ControlPersist each on and off.
Every run starts cold: the controller's ControlPersist masters are asked to exit before it.

    .venv/bin/python bench/run.py bench_fleet            # ~12 min on 2 cores
    .venv/bin/python bench/run.py bench_fleet --quick    # N = 1, 2, 4 only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path

from gpusim.fleet import inventory, lifecycle

REPO = Path(__file__).resolve().parent.parent

RESULTS = REPO / "bench" / "results"
BIN = Path(sys.executable).parent
DEFAULT_FORKS = 5


def env() -> t.Dict[str, str]:
    out = dict(os.environ)
    out.update({"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
                "ANSIBLE_NOCOLOR": "1", "PATH": "%s:%s" % (BIN, out.get("PATH", ""))})
    return out


def timed(argv: t.Sequence[str], rec, forks: int) -> float:
    lifecycle._exit_control_masters(rec)  # pylint: disable=protected-access  # every run starts cold
    started = time.monotonic()
    proc = subprocess.run([*argv, "--forks", str(forks)], env=env(), capture_output=True, text=True, timeout=900, check=False)
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit("bench_fleet: %s failed:\n%s" % (" ".join(argv), proc.stdout[-3000:] + proc.stderr[-2000:]))
    return took


def slope(points: t.Sequence[t.Tuple[int, float]]) -> float:
    n = len(points)
    mean_x = sum(x for x, _y in points) / n
    mean_y = sum(y for _x, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _y in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 1, 2, 4 only")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_fleet: needs root (namespaces); skipped", file=sys.stderr)
        return 1
    sizes = [1, 2, 4] if args.quick else [1, 2, 4, 8, 16]
    folder = Path(tempfile.mkdtemp(prefix="gpuops-benchfleet-"))
    rec = lifecycle.up(folder / "fleet", max(sizes), gpus=2)
    names = [node.name for node in rec.nodes]
    # every node in one batch, never halted, each restart forced (restart_vllm.yml's defaults roll one host first, then
    # 25 %, and converge)
    fleet_vars = {"vllm_server_tensor_parallel_size": 1, "vllm_server_gpus": [0], "vllm_server_drain": False,
                  "vllm_restart_serial": "100%", "vllm_restart_max_fail_percentage": 100, "vllm_server_state": "restarted"}
    runs: t.List[t.Dict[str, t.Any]] = []
    try:
        inventories = {n: inventory.write(rec, folder / ("inv-%d.yml" % n), nodes=names[:n], group_vars=fleet_vars)
                       for n in sizes}
        work = {
            "ping": lambda inv: [str(BIN / "ansible"), "-i", str(inv), "gpu_nodes", "-m", "ansible.builtin.ping"],
            "gpu_facts": lambda inv: [str(BIN / "ansible-playbook"), "-i", str(inv), str(REPO / "playbooks" / "gpu_facts.yml")],
            "gpu_cleanup": lambda inv: [str(BIN / "ansible-playbook"), "-i", str(inv), str(REPO / "playbooks" / "gpu_cleanup.yml")],
        }
        restart = [str(BIN / "ansible-playbook"), "-i", str(inventories[max(sizes)]), str(REPO / "playbooks" / "restart_vllm.yml")]
        timed(restart, rec, max(sizes))  # every node runs a server from here on: each measured restart is forced
        work["restart_vllm"] = lambda inv: [str(BIN / "ansible-playbook"), "-i", str(inv),
                                            str(REPO / "playbooks" / "restart_vllm.yml")]
        for what, command in work.items():
            for n in sizes:
                for forks in sorted({DEFAULT_FORKS, n}) if n > DEFAULT_FORKS else [n]:
                    best = min(timed(command(inventories[n]), rec, forks) for _round in range(1 if what == "restart_vllm" else 2))
                    runs.append({"what": what, "nodes": n, "forks": forks, "wall_s": round(best, 3)})
                    print("%-13s nodes=%-3d forks=%-3d %7.2f s" % (what, n, forks, best), flush=True)
        # pipelining and ControlPersist, gpu_facts.yml on 4 nodes (forks 4)
        effect = []
        for pipelining in (True, False):
            for persist in (True, False):
                inv = inventory.write(rec, folder / "inv-effect.yml", nodes=names[:4], pipelining=pipelining,
                                      control_persist=persist, group_vars=fleet_vars)
                best = min(timed(work["gpu_facts"](inv), rec, 4) for _round in range(2))
                effect.append({"pipelining": pipelining, "control_persist": persist, "wall_s": round(best, 3)})
    finally:
        lifecycle.down(rec)
    report(runs, effect, sizes)
    return 0


def report(runs: t.List[t.Dict[str, t.Any]], effect: t.List[t.Dict[str, t.Any]], sizes: t.Sequence[int]) -> None:
    print("\nwall time (s), forks = N | default forks (5) where N > 5")
    print("%-13s" % "nodes" + "".join("%14d" % n for n in sizes))
    marginal = {}
    for what in ("ping", "gpu_facts", "gpu_cleanup", "restart_vllm"):
        cells = []
        for n in sizes:
            by_forks = {r["forks"]: r["wall_s"] for r in runs if r["what"] == what and r["nodes"] == n}
            cell = "%.1f" % by_forks[n] + ("|%.1f" % by_forks[DEFAULT_FORKS] if DEFAULT_FORKS in by_forks and n > DEFAULT_FORKS else "")
            cells.append("%14s" % cell)
        print("%-13s" % what + "".join(cells))
        marginal[what] = slope([(r["nodes"], r["wall_s"]) for r in runs if r["what"] == what and r["forks"] == r["nodes"]])
    print("\nper-host marginal cost (slope over N, forks = N), ratio to the ping floor")
    for what, value in marginal.items():
        ratio = value / marginal["ping"] if marginal["ping"] > 0 else float("nan")
        print("  %-13s %6.3f s/host   x%.2f" % (what, value, ratio))
    print("\ngpu_facts.yml on 4 nodes (forks 4)")
    for row in effect:
        print("  pipelining=%-5s ControlPersist=%-5s %6.2f s" % (row["pipelining"], row["control_persist"], row["wall_s"]))
    print("load average: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_fleet.json").write_text(json.dumps(
        {"runs": runs, "marginal_s_per_host": marginal, "effect": effect, "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
