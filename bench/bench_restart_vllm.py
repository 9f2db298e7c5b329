# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A forced `restart_vllm.yml` on 1, 4 and 8 simulated hosts: the role's own cost, and how fast it notices /health.

For each fleet size N (forks = N), every host first runs a managed server (a first restart_vllm.yml run), then
the bench times a forced restart. Per run it reports:
  - the wall time of the playbook, and the role's cost above the fake server's own start-up
    (wall - GPUOPS_SIM_STARTUP_DELAY_S), per host and as a ratio to the 3 s target;
  - Ansible's own floor on the same inventory, measured in the same run: `ansible -m ping` (one module per host);
  - the notice latency: a sampler polls every server's /health every 10 ms from outside; the role's vllm_ready
    says when (seconds since the server started) it saw 200; latency = that - the sampler's first 200
    (target under 1 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulator"))

from _benchlib import REPO, ensure_simulator, median, save_results, table  # noqa: E402
from gpusim import inventory as sim_inventory  # noqa: E402


STARTUP_DELAY_S = 3.0
SIZES = (1, 4, 8)
TP = 2
BIN = Path(sys.executable).parent


def _env(forks: int) -> Dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORKS=str(forks),
                ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), PYTHONPATH=str(REPO / "simulator"),
                PATH="%s:%s" % (BIN, os.environ.get("PATH", "")), ANSIBLE_NOCOLOR="1")


def _gpusim(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "gpusim", *args], env=_env(1), check=True, capture_output=True,
                          text=True).stdout


class HealthSampler(threading.Thread):
    """Polls each port's /health every 10 ms; remembers the first 200 after each refusal/503 (epoch seconds)."""

    def __init__(self, ports: List[int]) -> None:
        super().__init__(daemon=True)
        self.ports = ports
        self.first_ok: Dict[int, float] = {}
        self.down: Dict[int, bool] = {port: False for port in ports}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for port in self.ports:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=0.5) as reply:
                        ok = reply.status == 200
                except OSError:
                    ok = False
                if not ok:
                    self.down[port] = True
                elif self.down[port] and port not in self.first_ok:
                    self.first_ok[port] = time.time()
            time.sleep(0.01)


def _run(cmd: List[str], forks: int) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(forks), capture_output=True, text=True, check=False)


def measure(size: int, root: Path) -> Dict[str, object]:
    hosts = {}
    ports = []
    for index in range(size):
        state = root / ("node-%02d" % index)
        _gpusim("create", "--state", str(state))
        port = 19000 + index + 10 * size
        ports.append(port)
        hosts[state.name] = sim_inventory.host_vars(state, port, vllm_server_tensor_parallel_size=TP)
        hosts[state.name]["vllm_server_host_env"]["GPUOPS_SIM_STARTUP_DELAY_S"] = str(STARTUP_DELAY_S)
    inventory = root / "inventory.json"
    inventory.write_text(json.dumps(sim_inventory.role_inventory(hosts, python=str(BIN / "python3"))))
    playbook = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / "restart_vllm.yml")]
    try:
        first = _run(playbook, size)
        if first.returncode != 0:
            raise RuntimeError("first restart failed:\n" + first.stdout[-3000:])
        ping_start = time.monotonic()
        ping = _run([str(BIN / "ansible"), "-i", str(inventory), "vllm_servers", "-m", "ansible.builtin.ping"], size)
        ping_s = time.monotonic() - ping_start
        if ping.returncode != 0:
            raise RuntimeError("ping failed: " + ping.stdout[-2000:])
        sampler = HealthSampler(ports)
        sampler.start()
        start = time.monotonic()
        run = _run(playbook, size)
        wall = time.monotonic() - start
        sampler.stop.set()
        sampler.join()
        if run.returncode != 0:
            raise RuntimeError("forced restart failed:\n" + run.stdout[-3000:])
        latencies = []
        for state_name, port in zip(sorted(hosts), ports):
            record = json.loads((root / state_name / "role" / ("vllm-%d.json" % port)).read_text())
            seen = sampler.first_ok.get(port)
            if seen is not None:
                # the role's own reading: elapsed_s of vllm_ready, counted from the server's create_time
                elapsed = _ready_elapsed(run.stdout, state_name)
                if elapsed is not None:
                    latencies.append(record["create_time"] + elapsed - seen)
        return {"hosts": size, "wall_s": wall, "overhead_s": wall - STARTUP_DELAY_S, "ping_s": ping_s,
                "notice_latency_s": latencies}
    finally:
        for state_name in hosts:
            _gpusim("cleanup", "--state", str(root / state_name))


def _ready_elapsed(output: str, host: str) -> "float | None":
    """The seconds from the server's start to the role seeing /health 200, as the summary prints them."""
    match = re.search(r"%s:\s+ready in ([0-9.]+) s" % re.escape(host), " ".join(output.split()))
    return float(match.group(1)) if match else None


def main() -> int:
    ensure_simulator()
    rows = []
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        for size in SIZES:
            figures = measure(size, Path(tmp) / ("fleet-%d" % size))
            results.append(figures)
            lat = figures["notice_latency_s"]
            rows.append([size, "%.1f" % figures["wall_s"], "%.2f" % figures["overhead_s"],
                         "%.2f" % (figures["overhead_s"] / 3.0), "%.2f" % figures["ping_s"],
                         "%.1f" % (figures["overhead_s"] / figures["ping_s"]),
                         "%.3f" % median(lat) if lat else "n/a", "%.3f" % max(lat) if lat else "n/a"])
    print("forced restart_vllm.yml, TP=%d per host, fake server start-up %.0f s, forks = hosts, load %.1f" % (
        TP, STARTUP_DELAY_S, os.getloadavg()[0]))
    print(table(["hosts", "wall s", "role cost s (wall - start-up)", "ratio to 3 s target", "ansible -m ping s",
                 "role cost / ping", "notice latency median s", "max s"], rows))
    worst = max(max(r["notice_latency_s"] or [0.0]) for r in results)
    print("notice latency: worst %.3f s, ratio to the 1 s target %.2f" % (worst, worst / 1.0))
    save_results("bench_restart_vllm", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
