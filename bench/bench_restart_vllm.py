# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a `restart_vllm.yml` costs on 1, 4, 8 and 16 simulated hosts, next to Ansible's own floor in the same run.

For each fleet size N (forks = N), every host first runs a managed server (a first restart_vllm.yml run), then the bench
runs, in this order, on the same inventory: `ansible -m ping`, `ansible -m ansible.builtin.command -a true`, a playbook
of 6 ansible.builtin.ping tasks (Ansible's own floor for as many module runs as a forced restart makes; each of these
three --repeats times, the median run by CPU counted), a forced restart (--repeats times at 1 host, the median
run counted; once on larger fleets; -e vllm_server_state=restarted, every host in one batch), and a rerun with
vllm_server_state=started (restart_vllm.yml's default) where nothing
changes. Per run it reports, per host:
  - module executions on the host, counted independently of the role: the inventory's ansible_python_interpreter is a
    small wrapper (_host_python.py) that runs the real interpreter as a child and logs each run's module name and the
    child's own rusage (wait4);
  - task results (ok, changed, skipped) from the play recap;
  - CPU seconds from the processes' own rusage, not wall time: the host's (the module processes, from the wrapper's log)
    and the controller's (RUSAGE_CHILDREN of this bench around ansible-playbook, less the modules and the wrappers:
    on the simulated fleet both sides are local processes, so the log is what separates them);
  - the wall time, and the role's cost above the fake server's own start-up (wall - GPUOPS_SIM_STARTUP_DELAY_S);
  - the notice latency: a sampler polls every server's /health every 10 ms from outside; the role's vllm_ready says
    when (seconds since the server started) it saw 200; latency = that - the sampler's first 200 (target under 1 s).
Then the slope per added host between fleet sizes, and PASS/FAIL lines against the targets below.

    .venv/bin/python bench/run.py bench_restart_vllm [--sizes 1,4,8,16] [--output DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

from _benchlib import REPO, ensure_simulator, median, save_results, table
from gpusim import inventory as sim_inventory


STARTUP_DELAY_S = 3.0
SIZES = (1, 4, 8, 16)
# the targets: module executions per host (forced, unchanged), the role's cost above the server's start-up
MAX_MODULES_FORCED = 6
MAX_MODULES_NOOP = 1
MAX_OVERHEAD_S = 3.0
# the role's cost above Ansible's own floor (a playbook of MAX_MODULES_FORCED pings), and task results per host
MAX_ABOVE_FLOOR_S = 2.5
MAX_RESULTS_FORCED = 20
MAX_RESULTS_NOOP = 8
MAX_CPU_PER_PING = 6.0
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


def _wrapper(root: Path) -> Path:
    """The host interpreter that logs each module execution (_host_python.py with a shebang to this Python)."""
    source = (Path(__file__).resolve().parent / "_host_python.py").read_text()
    path = root / "host-python"
    path.write_text("#!%s -S\n%s" % (sys.executable, source))
    path.chmod(0o755)
    return path


class Counted:
    """One ansible command's figures: module executions on the host, task results, CPU split, wall."""

    def __init__(self, cmd: List[str], forks: int, log: Path, expect_ok: bool = True) -> None:
        log.write_text("")
        env = _env(forks)
        env["GPUOPS_BENCH_MODULE_LOG"] = str(log)
        env["GPUOPS_BENCH_REAL_PYTHON"] = str(BIN / "python3")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        self.proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        self.wall_s = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if expect_ok and self.proc.returncode != 0:
            raise RuntimeError("%s failed:\n%s" % (" ".join(cmd[:4]), self.proc.stdout[-3000:] + self.proc.stderr[-2000:]))
        total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        self.lines = lines
        self.modules: Dict[str, int] = {}
        for line in lines:
            self.modules[line["module"]] = self.modules.get(line["module"], 0) + 1
        self.module_count = len(lines)
        self.host_cpu_s = sum(line["cpu_s"] for line in lines)
        self.wrapper_cpu_s = sum(line["wrapper_cpu_s"] for line in lines)
        self.controller_cpu_s = total - self.host_cpu_s - self.wrapper_cpu_s
        self.results = {key: 0 for key in ("ok", "changed", "skipped", "failed")}
        for key, value in re.findall(r"\b(ok|changed|skipped|failed)=(\d+)", self.proc.stdout):
            self.results[key] += int(value)

    def figures(self, hosts: int) -> Dict[str, Any]:
        return {"wall_s": self.wall_s, "modules_per_host": self.module_count / hosts, "modules": self.modules,
                "host_cpu_s_per_host": self.host_cpu_s / hosts, "controller_cpu_s_per_host": self.controller_cpu_s / hosts,
                "wrapper_cpu_s_per_host": self.wrapper_cpu_s / hosts,
                "cpu_s_per_host": (self.host_cpu_s + self.controller_cpu_s) / hosts,
                "results_per_host": {key: value / hosts for key, value in self.results.items()}}


FLOOR_PLAYBOOK = """- name: Ansible's own floor for a forced restart's round trips
  hosts: vllm_servers
  gather_facts: false
  tasks:
%s"""


def _floor_playbook(root: Path, tasks: int) -> Path:
    """A playbook of ``tasks`` ansible.builtin.ping tasks: what ansible-playbook costs for that many module runs."""
    path = root / "floor.yml"
    path.write_text(FLOOR_PLAYBOOK % "".join("    - name: Round trip %d\n      ansible.builtin.ping:\n" % (index + 1)
                                             for index in range(tasks)))
    return path


def _median_run(runs: List["Counted"]) -> "Counted":
    """Of repeated runs of one command, the one with the median CPU (a ~2 s run swings by 20% under load)."""
    ordered = sorted(runs, key=lambda run: run.host_cpu_s + run.controller_cpu_s)
    return ordered[len(ordered) // 2]


def measure(size: int, root: Path, output: "Path | None" = None, repeats: int = 3) -> Dict[str, Any]:
    root.mkdir(parents=True)
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
    # the fake server runs on the real interpreter; Ansible's modules go through the counting wrapper
    # every host in one batch, never halted (restart_vllm.yml's defaults roll one host first, then 25 %)
    inventory.write_text(json.dumps(sim_inventory.role_inventory(hosts, python=str(BIN / "python3"),
                                                                 ansible_python_interpreter=str(_wrapper(root)),
                                                                 vllm_restart_serial="100%", vllm_restart_max_fail_percentage=100)))
    log = root / "modules.jsonl"
    playbook = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / "restart_vllm.yml")]
    forced = playbook + ["-e", "vllm_server_state=restarted"]
    adhoc = [str(BIN / "ansible"), "-i", str(inventory), "vllm_servers"]
    try:
        Counted(forced, size, log)
        floor_cmd = [playbook[0], "-i", str(inventory), str(_floor_playbook(root, MAX_MODULES_FORCED))]
        ping = _median_run([Counted(adhoc + ["-m", "ansible.builtin.ping"], size, log) for repeat in range(repeats)])
        true = _median_run([Counted(adhoc + ["-m", "ansible.builtin.command", "-a", "true"], size, log) for repeat in range(repeats)])
        floor = _median_run([Counted(floor_cmd, size, log) for repeat in range(repeats)])
        latencies_of: Dict[int, List[Dict[str, float]]] = {}
        restarts = []
        for repeat in range(repeats if size == 1 else 1):  # a forced restart of 16 hosts takes minutes: once
            sampler = HealthSampler(ports)
            sampler.start()
            counted = Counted(forced, size, log)
            sampler.stop.set()
            sampler.join()
            restarts.append(counted)
            latencies_of[id(counted)] = _notice_latencies(root, hosts, ports, sampler, counted)
        run = _median_run(restarts)
        latencies = latencies_of[id(run)]
        noop = Counted(playbook + ["-e", "vllm_server_state=started"], size, log)
        if output is not None:
            # what each run printed, task by task: which tasks ran, which were skipped
            output.mkdir(parents=True, exist_ok=True)
            for label, counted in (("restart", run), ("noop", noop)):
                (output / ("%s-%d.txt" % (label, size))).write_text(counted.proc.stdout)
        if "changed=0" not in noop.proc.stdout or re.search(r"changed=[1-9]", noop.proc.stdout):
            raise RuntimeError("the rerun changed something:\n" + noop.proc.stdout[-3000:])
        return {"hosts": size, "overhead_s": run.wall_s - STARTUP_DELAY_S, "notice_latency_s": latencies,
                "ping": ping.figures(size), "command_true": true.figures(size), "floor": floor.figures(size),
                "restart": run.figures(size),
                "noop": noop.figures(size)}
    finally:
        for state_name in hosts:
            _gpusim("cleanup", "--state", str(root / state_name))


def _notice_latencies(root: Path, hosts: Dict[str, Any], ports: List[int], sampler: HealthSampler,
                      run: Counted) -> List[Dict[str, float]]:
    """Per host: when the role saw /health 200 against when the outside sampler first did (seconds).

    ``latency``: role - sampler. ``after_step``: counted from the later of the sampler's first 200 and the start of
    the host's first vllm_ready module run (the wrapper's log, by the port in its url): how fast the ready step notices
    once it runs. Under the linear
    strategy the step begins only when every host's launch task has ended, and with many hosts on a small machine a
    server can be up before that; ``step_late`` is that wait (the ready step's start - the sampler's first 200)."""
    step_starts: Dict[int, float] = {}
    for line in run.lines:
        if line["module"] == "vllm_ready" and line.get("port") is not None:
            step_starts[line["port"]] = min(line["start"], step_starts.get(line["port"], line["start"]))
    latencies = []
    for state_name, port in zip(sorted(hosts), ports):
        record = json.loads((root / state_name / "role" / ("vllm-%d.json" % port)).read_text())
        seen = sampler.first_ok.get(port)
        if seen is not None:
            # the role's own reading: elapsed_s of vllm_ready, counted from the server's create_time
            elapsed = _ready_elapsed(run.proc.stdout, state_name)
            if elapsed is not None:
                noticed = record["create_time"] + elapsed
                step_start = step_starts.get(port)
                begun = max(seen, step_start) if step_start is not None else seen
                latencies.append({"latency": noticed - seen, "after_step": noticed - begun,
                                  "step_late": max(0.0, step_start - seen) if step_start is not None else 0.0})
    return latencies


def _ready_elapsed(output: str, host: str) -> "float | None":
    """The seconds from the server's start to the role seeing /health 200, as the summary prints them."""
    match = re.search(r"%s:\s+ready in ([0-9.]+) s" % re.escape(host), " ".join(output.split()))
    return float(match.group(1)) if match else None


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(results: List[Dict[str, Any]]) -> List[str]:
    """The tables and the PASS/FAIL lines."""
    out = ["restart_vllm.yml, TP=%d per host, fake server start-up %.0f s, forks = hosts, load %.2f %.2f %.2f, %s" % (
        (TP, STARTUP_DELAY_S) + os.getloadavg() + (time.strftime("%Y-%m-%d %H:%M"),))]
    rows = []
    for res in results:
        size = res["hosts"]
        for label in ("ping", "command_true", "floor", "restart", "noop"):
            fig = res[label]
            rows.append([size, {"ping": "ansible -m ping", "command_true": "ansible -m command -a true",
                                "floor": "playbook of %d pings" % MAX_MODULES_FORCED,
                                "restart": "forced restart", "noop": "rerun, no change"}[label],
                         "%.1f" % fig["wall_s"], "%.1f" % fig["modules_per_host"],
                         "%.0f/%.0f/%.0f" % tuple(fig["results_per_host"][k] for k in ("ok", "changed", "skipped")),
                         "%.2f" % fig["controller_cpu_s_per_host"], "%.2f" % fig["host_cpu_s_per_host"],
                         "%.2f" % fig["cpu_s_per_host"], "%.1f" % (fig["cpu_s_per_host"] / res["ping"]["cpu_s_per_host"])])
    out.append(table(["hosts", "run", "wall s", "module runs / host", "ok/changed/skipped / host", "controller CPU s / host",
                      "host CPU s / host", "CPU s / host", "CPU / ping"], rows))
    first = results[0]
    per_host = {k: v / first["hosts"] for k, v in first["restart"]["modules"].items()}
    out.append("forced restart: modules per host %s" % json.dumps(first["restart"]["modules"] if first["hosts"] == 1 else per_host))
    out.append("rerun, no change: modules per host %s" % json.dumps({k: v / first["hosts"] for k, v in first["noop"]["modules"].items()}))
    rows = []
    for res in results:
        lat = [entry["latency"] for entry in res["notice_latency_s"]]
        after = [entry["after_step"] for entry in res["notice_latency_s"]]
        late = [entry["step_late"] for entry in res["notice_latency_s"]]
        rows.append([res["hosts"], "%.1f" % res["restart"]["wall_s"], "%.2f" % res["overhead_s"],
                     "%.2f" % (res["overhead_s"] / MAX_OVERHEAD_S), "%.1f" % res["floor"]["wall_s"],
                     "%.2f" % (res["overhead_s"] - res["floor"]["wall_s"]),
                     "%.3f / %.3f" % (median(lat), max(lat)) if lat else "n/a",
                     "%.3f / %.3f" % (median(after), max(after)) if after else "n/a",
                     "%.2f" % max(late) if late else "n/a"])
    out.append(table(["hosts", "forced restart wall s", "role cost s (wall - start-up)", "ratio to 3 s target",
                      "floor wall s (%d pings)" % MAX_MODULES_FORCED, "role cost - floor s",
                      "notice latency median / max s", "after the ready step began", "step began late by s"], rows))
    rows = []
    for low, high in zip(results, results[1:]):
        added = high["hosts"] - low["hosts"]

        def slope(label: str, key: str, low: Dict[str, Any] = low, high: Dict[str, Any] = high) -> str:
            # totals, not per host: what one more host adds
            return "%.2f" % ((high[label][key] * high["hosts"] - low[label][key] * low["hosts"]) / added)

        rows.append(["%d -> %d" % (low["hosts"], high["hosts"]),
                     "%.2f" % ((high["restart"]["wall_s"] - low["restart"]["wall_s"]) / added),
                     slope("restart", "controller_cpu_s_per_host"), slope("restart", "host_cpu_s_per_host"),
                     slope("restart", "cpu_s_per_host"), slope("ping", "cpu_s_per_host"),
                     "%.2f" % ((high["ping"]["wall_s"] - low["ping"]["wall_s"]) / added)])
    if rows:
        out.append("slope per added host (forced restart unless named):")
        out.append(table(["hosts", "wall s", "controller CPU s", "host CPU s", "CPU s", "ping CPU s", "ping wall s"], rows))
    one = [res for res in results if res["hosts"] == 1]
    for res in one:
        restart, noop = res["restart"], res["noop"]
        ratio = restart["cpu_s_per_host"] / res["ping"]["cpu_s_per_host"]
        out.append("%s module executions of a forced restart of 1 host: %.0f (target <= %d)" % (
            _verdict(restart["modules_per_host"] <= MAX_MODULES_FORCED), restart["modules_per_host"], MAX_MODULES_FORCED))
        out.append("%s module executions of a rerun where nothing changes: %.0f (target <= %d)" % (
            _verdict(noop["modules_per_host"] <= MAX_MODULES_NOOP), noop["modules_per_host"], MAX_MODULES_NOOP))
        out.append("%s role cost above the server's start-up at 1 host: %.2f s (target <= %.0f s)" % (
            _verdict(res["overhead_s"] <= MAX_OVERHEAD_S), res["overhead_s"], MAX_OVERHEAD_S))
        above = res["overhead_s"] - res["floor"]["wall_s"]
        out.append("%s role cost above Ansible's floor (%d pings) at 1 host: %.2f s (target <= %.1f s)" % (
            _verdict(above <= MAX_ABOVE_FLOOR_S), MAX_MODULES_FORCED, above, MAX_ABOVE_FLOOR_S))
        for label, run, most in (("a forced restart", restart, MAX_RESULTS_FORCED), ("a rerun where nothing changes", noop, MAX_RESULTS_NOOP)):
            shown = sum(run["results_per_host"][key] for key in ("ok", "skipped", "failed"))
            out.append("%s task results per host of %s: %.0f (target <= %d)" % (_verdict(shown <= most), label, shown, most))
        out.append("%s CPU of a forced restart of 1 host / CPU of ansible -m ping: %.1fx (%.2f s / %.2f s, target <= %.0fx)" % (
            _verdict(ratio <= MAX_CPU_PER_PING), ratio, restart["cpu_s_per_host"], res["ping"]["cpu_s_per_host"], MAX_CPU_PER_PING))
    for res in one:
        worst = max([entry["latency"] for entry in res["notice_latency_s"]] or [0.0])
        out.append("%s notice latency at 1 host: %.3f s (target < 1 s)" % (_verdict(worst < 1.0), worst))
    if any(res["hosts"] > 1 for res in results):
        out.append("(with more simulated hosts than cores, the ready module's own start-up on the host competes with every other "
                   "host's starting server for the same CPUs: the larger fleets' latencies are shown, not judged)")
    return out


def _exit_on_term(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(size) for size in SIZES), help="fleet sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each baseline (ping, command, the playbook floor); the median run's figures count")
    parser.add_argument("--output", type=Path, help="save the forced restart's and the rerun's output here (restart-N.txt, noop-N.txt)")
    args = parser.parse_args(argv)
    # a SIGTERM (timeout, a CI step ending) still ends every fake server: measure()'s finally runs on SystemExit
    signal.signal(signal.SIGTERM, _exit_on_term)
    ensure_simulator()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        for size in (int(word) for word in args.sizes.split(",")):
            results.append(measure(size, Path(tmp) / ("fleet-%d" % size), args.output, args.repeats))
    print("\n".join(report(results)))
    save_results("bench_restart_vllm", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
