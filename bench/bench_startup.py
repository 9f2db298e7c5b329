# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the compile cache saves a restart, on the fake vLLM with weights 8 s, compile 20 s, graphs 6 s (issue 36).

1. A forced restart_vllm.yml to the same configuration, cold (the host's compile cache emptied first) against warm
   (the cache the previous start-up wrote): --repeats pairs, cold and warm alternately, each the median. Per run: the
   start-up (the role's ready_s: from the server's start until it answered), the playbook's wall time, and the phases the
   summary line shows; the fake's own record (STATE/startups.jsonl) says whether it compiled. Target: warm start-up
   <= 0.5 x cold.
2. A three-configuration benchmark_matrix.yml (one round; the configurations differ only in NCCL_PROTO, which the
   compile cache's key leaves out), before against after: before, each configuration has a compile cache of its own,
   empty (VLLM_CACHE_ROOT: a fresh folder per configuration, as if the cache were emptied before each launch); after,
   they share the host's one cache, so only the first compiles. Target: after < before (the saving: two compiles).

    .venv/bin/python bench/run.py bench_startup [--repeats 3] [--weights 8] [--compile 20] [--graphs 6]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from _benchlib import REPO, ensure_simulator, median, save_results, table
from inventories import role_host_vars, write_role_inventory
from simhost import SimHost

RESTART = REPO / "playbooks" / "restart_vllm.yml"
MATRIX = REPO / "playbooks" / "benchmark_matrix.yml"
BIN = Path(sys.executable).parent
TARGET_WARM = 0.5
LOAD = {"vllm_server_benchmark_input_len": 16, "vllm_server_benchmark_output_len": 16, "vllm_server_benchmark_num_requests": 2,
        "vllm_server_benchmark_concurrency": 1, "vllm_server_benchmark_warmup_requests": 0}


def _env() -> Dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
                PATH="%s:%s" % (BIN, os.environ.get("PATH", "")), ANSIBLE_NOCOLOR="1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _records(host: SimHost) -> List[Dict[str, Any]]:
    path = host.state / "startups.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _playbook(playbook: Path, inventory: Path, *extra: str) -> Dict[str, Any]:
    began = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *extra], env=_env(),
                          capture_output=True, text=True, check=False, timeout=1800)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (playbook.name, proc.stdout[-4000:] + proc.stderr[-2000:]))
    ready = re.search(r"ready in ([0-9.]+) s", proc.stdout)
    line = re.search(r"(start-up [^'\"]*)", proc.stdout)
    return {"wall_s": wall, "ready_s": float(ready.group(1)) if ready else None,
            "line": re.sub(r"\s*\n\s*", " ", line.group(1)).strip() if line else ""}


def _inventory(root: Path, host: SimHost, env: Dict[str, str], **group_vars: Any) -> Path:
    entries = {host.name: role_host_vars(host, host.port, vllm_server_env=env)}
    return write_role_inventory(root / "inventory.json", entries, **group_vars)


def restarts(host: SimHost, root: Path, env: Dict[str, str], repeats: int) -> Dict[str, Any]:
    """Forced restarts of one configuration, cold and warm alternately."""
    inventory = _inventory(root, host, env)
    cache = host.state / "home" / ".cache" / "vllm"
    runs: Dict[str, List[Dict[str, Any]]] = {"cold": [], "warm": []}
    _playbook(RESTART, inventory)  # a server runs: every measured run is a restart
    for _pair in range(repeats):
        for kind in ("cold", "warm"):
            if kind == "cold":
                shutil.rmtree(cache, ignore_errors=True)
            run = _playbook(RESTART, inventory)
            run["compiled"] = _records(host)[-1]["compiled"]
            runs[kind].append(run)
            print("  %s: start-up %.1f s, restart %.1f s, compiled=%s | %s" % (kind, run["ready_s"], run["wall_s"], run["compiled"], run["line"]),
                  flush=True)
    return runs


def matrices(host: SimHost, root: Path, env: Dict[str, str]) -> Dict[str, Any]:
    """One round of three configurations (NCCL_PROTO only), each with a cache of its own (before) or one shared (after)."""
    protos = ("LL", "LL128", "Simple")
    found = {}
    for kind in ("before", "after"):
        shutil.rmtree(host.state / "home" / ".cache" / "vllm", ignore_errors=True)
        configs = []
        for proto in protos:
            config_env = {"NCCL_PROTO": proto}
            if kind == "before":
                config_env["VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="cache-%s-" % proto, dir=str(root))
            configs.append({"name": proto, "env": config_env})
        results = root / ("results-" + kind)
        inventory = _inventory(root, host, env, vllm_benchmark_configs=configs, vllm_benchmark_repeats=1,
                               vllm_benchmark_results_dir=str(results), **LOAD)
        seen = len(_records(host))
        run = _playbook(MATRIX, inventory)
        run["compiled"] = [record["compiled"] for record in _records(host)[seen:]]
        found[kind] = run
        print("  matrix %s: %.1f s, compiled per launch: %s" % (kind, run["wall_s"], run["compiled"]), flush=True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--weights", type=float, default=8.0)
    parser.add_argument("--compile", type=float, default=20.0)
    parser.add_argument("--graphs", type=float, default=6.0)
    parser.add_argument("--skip-matrix", action="store_true")
    args = parser.parse_args()
    ensure_simulator()
    env = {"GPUOPS_SIM_WEIGHTS_S": str(args.weights), "GPUOPS_SIM_COMPILE_S": str(args.compile),
           "GPUOPS_SIM_GRAPHS_S": str(args.graphs)}
    with tempfile.TemporaryDirectory(prefix="gpuops-bench-startup-") as tmp:
        root = Path(tmp)
        host = SimHost("bench-startup", root / "state")
        host.port = _free_port()
        host.gpusim("create")
        try:
            runs = restarts(host, root, env, args.repeats)
            matrix = None if args.skip_matrix else matrices(host, root, env)
        finally:
            host.cleanup()
    cold = {key: median([run[key] for run in runs["cold"]]) for key in ("ready_s", "wall_s")}
    warm = {key: median([run[key] for run in runs["warm"]]) for key in ("ready_s", "wall_s")}
    ratio = warm["ready_s"] / cold["ready_s"]
    rows = [["cold (cache emptied)", "%.1f" % cold["ready_s"], "%.1f" % cold["wall_s"], "1.00",
             ",".join(str(run["compiled"]) for run in runs["cold"])],
            ["warm (cache kept)", "%.1f" % warm["ready_s"], "%.1f" % warm["wall_s"], "%.2f" % ratio,
             ",".join(str(run["compiled"]) for run in runs["warm"])]]
    print(table(["forced restart, same config", "start-up s", "restart s", "start-up vs cold", "compiled (fake's record)"], rows))
    print("cold: " + runs["cold"][-1]["line"])
    print("warm: " + runs["warm"][-1]["line"])
    ok = ratio <= TARGET_WARM and all(run["compiled"] for run in runs["cold"]) and not any(run["compiled"] for run in runs["warm"])
    verdict = "PASS" if ok else "FAIL"
    print("%s: warm start-up %.2fx cold (target <= %.2fx); whole restart %.2fx" % (verdict, ratio, TARGET_WARM, warm["wall_s"] / cold["wall_s"]))
    figures: Dict[str, Any] = {"knobs": env, "restarts": runs, "cold": cold, "warm": warm, "warm_vs_cold": ratio}
    if matrix is not None:
        before, after = matrix["before"]["wall_s"], matrix["after"]["wall_s"]
        print(table(["3-config matrix (NCCL_PROTO only)", "wall s", "vs before", "compiled per launch"],
                    [["before (a cache each, empty)", "%.1f" % before, "1.00", matrix["before"]["compiled"]],
                     ["after (one shared cache)", "%.1f" % after, "%.2f" % (after / before), matrix["after"]["compiled"]]]))
        print("%s: the matrix after %.2fx before (saved %.0f s)" % ("PASS" if after < before else "FAIL", after / before, before - after))
        figures["matrix"] = matrix
    path = save_results("bench_startup", figures)
    if path:
        print("figures: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
