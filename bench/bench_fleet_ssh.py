# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The read and cleanup playbooks over SSH at 32 and 64 nodes: controller CPU per host against `ansible -m ping`.

As root (network and PID namespaces): gpusim.fleet nodes, each with its own sshd and 8 idle simulated GPUs (no
vLLM server), in fleets of at most 32 nodes (a fleet's /24 holds 63), one inventory over all of them. For each
node count N (an inventory of the first N nodes), each forks value and each strategy, one cold run (the
ControlPersist masters are ended before it) of:

- `ansible gpu_nodes -m ansible.builtin.ping`: Ansible's own floor (connect, one trivial module, return);
- `gpu_facts.yml` (read every GPU, print the table) and `gpu_cleanup.yml` (read, nothing to end, verify, summary),
  each with the shipped default `linear` and with `ANSIBLE_STRATEGY=free` (the playbooks are not changed).

Each run records its wall time, the controller's CPU seconds (the rusage of ansible(-playbook) and every process
it waited for, plus the ControlPersist ssh masters, which this process reaps as their child subreaper), the main
ansible process's own CPU (the strategy loop, one core at most) and the nodes' CPU (sshd and everything under it,
from /proc of each node's sshd and init, read once the sessions are gone). On this shared 2-core machine the
nodes run on the controller's cores, so wall time measures the machine; CPU per host is the figure to compare.
Then, per command: the marginal cost per added host (the slope between the two largest N), its ratio to ping's
in the same run, and what one controller core sustains. Every namespace, sshd and master is ended at the end,
also on failure, and the bench checks that none is left.

    .venv/bin/python bench/run.py bench_fleet_ssh                                # N = 1, 32, 64; forks 5, 16, 32, 64
    .venv/bin/python bench/run.py bench_fleet_ssh --nodes 1 4 --forks 2 4        # a smoke test, about 2 minutes
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path

import yaml

from _benchlib import BenchError, ensure_simulator, save_results, table
from gpusim.fleet import inventory, lifecycle
from gpusim.fleet.record import FleetRecord
from gpusim.fleet.system import alive, netns_exists

REPO = Path(__file__).resolve().parent.parent

BIN = Path(sys.executable).parent
PLAYBOOKS = REPO / "playbooks"
PR_SET_CHILD_SUBREAPER = 36
FLEET_SIZE = 32  # nodes per gpusim.fleet (one /24 each: at most 63)
TICK = os.sysconf("SC_CLK_TCK")
# earlier fleet target (bench_fleet.py): a read or cleanup pass costs at most 2x Ansible's own per-host floor
RATIO_TARGET = 2.0
RUN_TIMEOUT_S = 900


class Fleets:
    """Several gpusim.fleet records seen as one list of nodes; each is torn down by its record."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.recs: t.List[FleetRecord] = []

    def up(self, nodes: int, gpus: int) -> None:
        left = nodes
        while left:
            size = min(FLEET_SIZE, left)
            started = time.monotonic()
            self.recs.append(lifecycle.up(self.folder / ("fleet-%d" % len(self.recs)), size, gpus=gpus))
            print("fleet %d: %d nodes up in %.0f s" % (len(self.recs) - 1, size, time.monotonic() - started), flush=True)
            left -= size

    def hosts(self) -> t.List[t.Tuple[str, FleetRecord, str]]:
        """(inventory name, record, node name) of every node, fleet by fleet."""
        return [("f%d-%s" % (number, node.name), rec, node.name) for number, rec in enumerate(self.recs) for node in rec.nodes]

    def inventory(self, path: Path, count: int) -> Path:
        """An inventory of the first <count> nodes; each fleet's connection variables (key, control folder) per host."""
        chosen = self.hosts()[:count]
        hosts: t.Dict[str, t.Any] = {}
        for rec in self.recs:
            names = [node for _host, owner, node in chosen if owner is rec]
            if not names:
                continue
            built = inventory.build(rec, nodes=names)
            common = built["all"]["vars"]
            for name, entry in built["all"]["children"]["gpu_nodes"]["hosts"].items():
                hosts["f%d-%s" % (self.recs.index(rec), name)] = dict(common, **entry)
        data = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}
        path.write_text(yaml.safe_dump(data, default_flow_style=False, sort_keys=False))
        return path

    def control_dirs(self) -> t.List[Path]:
        return [rec.path / "cp" for rec in self.recs]

    def node_roots(self) -> t.List[int]:
        """The machine PIDs of every node's init (PID 1 of its namespace)."""
        found = []
        for rec in self.recs:
            for node in rec.nodes:
                init = node.init_proc()
                if init is not None and alive(init.pid, init.starttime):
                    found.append(init.pid)
        return found

    def down(self) -> t.List[str]:
        """End every fleet; the problems (a fleet that could not be ended) as text."""
        problems = []
        for rec in self.recs:
            try:
                lifecycle.down(rec)
            except Exception as error:  # pylint: disable=broad-exception-caught  # the other fleets still go down
                problems.append(str(error))
        return problems

    def leftovers(self) -> t.List[str]:
        """What a correct teardown leaves nothing of: the recorded namespaces and processes, and the masters."""
        found = []
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout.split()
        for rec in self.recs:
            for node in rec.nodes:
                if netns_exists(node.netns) or node.netns in listed:
                    found.append("namespace %s" % node.netns)
                found += ["PID %d (%s)" % (p.pid, p.what) for p in node.procs if alive(p.pid, p.starttime)]
        found += ["ssh master PID %d" % pid for pid in master_children()]
        return found


# ------------------------------------------------------------------ processes and their CPU


def proc_stat(pid: int) -> t.Optional[t.List[str]]:
    """The fields of /proc/<pid>/stat after the command name (fields[0] is proc(5)'s field 3); None when gone."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()
    except OSError:
        return None


def own_cpu(fields: t.Sequence[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def waited_cpu(fields: t.Sequence[str]) -> float:
    return (int(fields[13]) + int(fields[14])) / TICK  # cutime, cstime: the children it reaped


def parents() -> t.Dict[int, t.Tuple[int, str]]:
    """PID -> (parent PID, state) of every process of the machine."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields:
                found[int(entry)] = (int(fields[1]), fields[0])
    return found


def master_children() -> t.List[int]:
    """What ansible left for this process to reap: the ControlPersist ssh masters reparented here (it starts no other
    ssh it does not wait for) and any other orphan that has exited; never the fleet's own node processes."""
    found = []
    for pid, (ppid, state) in parents().items():
        if ppid != os.getpid() or pid in lifecycle._STARTED:  # pylint: disable=protected-access
            continue
        try:
            with open("/proc/%d/comm" % pid, encoding="utf-8") as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        if comm == "ssh" or state == "Z":
            found.append(pid)
    return found


def end_masters(control_dirs: t.Sequence[Path]) -> t.Tuple[float, int]:
    """Ask every master to exit by its socket, then reap each (this process is their subreaper): (their CPU s, count)."""
    for folder in control_dirs:
        if not folder.is_dir():
            continue
        for sock in sorted(folder.iterdir()):
            if sock.is_socket():
                subprocess.run(["ssh", "-o", "ControlPath=%s" % sock, "-O", "exit", "fleet-node"],
                               capture_output=True, timeout=10, check=False)
    cpu = 0.0
    count = 0
    deadline = time.monotonic() + 10
    pids = master_children()
    while pids:
        for pid in pids:
            try:
                done, _status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if done:
                cpu += usage.ru_utime + usage.ru_stime
                count += 1
        pids = master_children()
        if pids and time.monotonic() > deadline:
            raise BenchError("ssh masters %s did not exit after -O exit" % pids)
        time.sleep(0.05)
    return cpu, count


def node_cpu(roots: t.Sequence[int]) -> float:
    """CPU seconds of every node so far: each init and sshd, their own and what they reaped.

    Read when no session is left, so everything a run started on the nodes has been reaped into an sshd or an init."""
    table_ = parents()
    deadline = time.monotonic() + 15
    while True:
        sshds = [pid for pid, (ppid, _state) in table_.items() if ppid in roots]
        busy = [pid for pid, (ppid, _state) in table_.items() if ppid in sshds]
        if not busy:
            break
        if time.monotonic() > deadline:
            raise BenchError("node sessions %s did not end" % busy[:8])
        time.sleep(0.1)
        table_ = parents()
    total = 0.0
    for pid in [*roots, *sshds]:
        fields = proc_stat(pid)
        if fields:
            total += own_cpu(fields) + waited_cpu(fields)
    return total


def run_measured(argv: t.Sequence[str], env: t.Dict[str, str], log: Path) -> t.Dict[str, float]:
    """Run <argv> to its end: wall s, its CPU with every child it waited for, and its own CPU (sampled until its exit)."""
    with open(log, "wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    main_cpu = 0.0
    try:
        while True:
            done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if done:
                break
            fields = proc_stat(proc.pid)
            if fields and fields[0] != "Z":
                main_cpu = own_cpu(fields)
            if time.monotonic() - started > RUN_TIMEOUT_S:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session, started here
                os.wait4(proc.pid, 0)
                raise BenchError("%s ran over %d s (see %s)" % (argv[0], RUN_TIMEOUT_S, log))
            time.sleep(0.05)
    finally:
        if proc.returncode is None:
            proc.returncode = -1  # reaped here by wait4; Popen must not wait for it again
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "main_cpu_s": main_cpu, "rc": proc.returncode}


def check_output(log: Path, hosts: int, what: str) -> None:
    """Every host answered: ping's SUCCESS lines, or a recap with no failure and no unreachable host."""
    text = log.read_text(errors="replace")
    if what == "ping":
        good = len(re.findall(r"^\S+ \| SUCCESS", text, re.M))
    else:
        good = sum(1 for line in re.findall(r"^\S+\s+:\s+ok=.*$", text, re.M)
                   if " unreachable=0 " in line and " failed=0 " in line and not line.startswith("localhost"))
    if good != hosts:
        raise BenchError("%s: %d of %d hosts succeeded (see %s):\n%s" % (what, good, hosts, log, text[-2500:]))


def summary_counts(log: Path) -> t.Dict[str, int]:
    """How often gpu_cleanup.yml's run_once summary ran, and how many of its lines said a host had no result."""
    text = log.read_text(errors="replace")
    return {"summaries": text.count("TASK [Summarise every host]"), "no_result_lines": text.count("NO RESULT")}


# ------------------------------------------------------------------ the bench


def commands(inv: Path) -> t.Dict[str, t.List[str]]:
    return {
        "ping": [str(BIN / "ansible"), "-i", str(inv), "gpu_nodes", "-m", "ansible.builtin.ping"],
        "gpu_facts": [str(BIN / "ansible-playbook"), "-i", str(inv), str(PLAYBOOKS / "gpu_facts.yml")],
        "gpu_cleanup": [str(BIN / "ansible-playbook"), "-i", str(inv), str(PLAYBOOKS / "gpu_cleanup.yml")],
    }


def ansible_env(strategy: str) -> t.Dict[str, str]:
    env = dict(os.environ)
    env.update({"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
                "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STRATEGY": strategy, "PATH": "%s:%s" % (BIN, env.get("PATH", ""))})
    return env


def measure(fleets: Fleets, folder: Path, sizes: t.Sequence[int], forks_values: t.Sequence[int],
            free_forks: t.Sequence[int]) -> t.List[t.Dict[str, t.Any]]:
    """One cold run of each command at each N and forks (`linear`), and of the playbooks with `free` at free_forks."""
    runs = []
    for n in sizes:
        inv = fleets.inventory(folder / ("inv-%d.yml" % n), n)
        forks_here = sorted({min(f, n) for f in forks_values} | {min(f, n) for f in free_forks})
        free_here = {min(f, n) for f in free_forks} if n > 1 else set()
        for forks in forks_here:
            for what, argv in commands(inv).items():
                strategies = ["linear"] if forks in {min(f, n) for f in forks_values} or what == "ping" else []
                if what != "ping" and forks in free_here:
                    strategies.append("free")
                for strategy in strategies:
                    end_masters(fleets.control_dirs())  # cold: no master left from the run before
                    roots = fleets.node_roots()
                    node_before = node_cpu(roots)
                    log = folder / ("%s-%d-%d-%s.log" % (what, n, forks, strategy))
                    load = os.getloadavg()[0]
                    got = run_measured([*argv, "--forks", str(forks)], ansible_env(strategy), log)
                    check_output(log, n, what)
                    master_cpu, masters = end_masters(fleets.control_dirs())
                    node_after = node_cpu(roots)
                    row = {"what": what, "strategy": strategy, "nodes": n, "forks": forks,
                           "wall_s": round(got["wall_s"], 3), "ctrl_cpu_s": round(got["cpu_s"] + master_cpu, 3),
                           "main_cpu_s": round(got["main_cpu_s"], 3), "master_cpu_s": round(master_cpu, 3),
                           "masters": masters, "node_cpu_s": round(node_after - node_before, 3), "load1": round(load, 2)}
                    if what == "gpu_cleanup":
                        row.update(summary_counts(log))
                    runs.append(row)
                    print("%-11s %-6s N=%-3d forks=%-3d wall %6.2f s  controller CPU %6.2f s (%.3f/host, main %.2f)"
                          "  nodes CPU %6.2f s  load %.1f" % (
                              what, strategy, n, forks, row["wall_s"], row["ctrl_cpu_s"], row["ctrl_cpu_s"] / n,
                              row["main_cpu_s"], row["node_cpu_s"], load), flush=True)
    return runs


def pick(runs: t.Sequence[t.Dict[str, t.Any]], what: str, strategy: str, n: int, forks: int) -> t.Optional[t.Dict[str, t.Any]]:
    return next((r for r in runs if r["what"] == what and r["strategy"] == strategy and r["nodes"] == n
                 and r["forks"] == min(forks, n)), None)


def report(runs: t.Sequence[t.Dict[str, t.Any]], sizes: t.Sequence[int]) -> t.Dict[str, t.Any]:
    rows = []
    for r in runs:
        ping = pick(runs, "ping", "linear", r["nodes"], r["forks"])
        rows.append([r["what"], r["strategy"], r["nodes"], r["forks"], r["wall_s"], r["ctrl_cpu_s"] / r["nodes"],
                     r["main_cpu_s"] / r["nodes"], r["node_cpu_s"] / r["nodes"],
                     "%.2f" % (r["ctrl_cpu_s"] / ping["ctrl_cpu_s"]) if ping else "-", r["load1"]])
    print("\nevery run (CPU seconds per host; x ping: controller CPU over ping's, same N and forks)")
    print(table(["command", "strategy", "N", "forks", "wall s", "ctrl CPU/host", "main/host", "node CPU/host",
                 "x ping", "load"], rows))
    verdicts: t.List[t.Dict[str, t.Any]] = []
    big = sorted(n for n in sizes if n > 1)
    if len(big) < 2:
        print("\n(one node count above 1: no slope)")
        return {"slopes": [], "verdicts": verdicts}
    low, high = big[-2], big[-1]
    slopes = []
    for forks in sorted({r["forks"] for r in runs if r["nodes"] == high}):
        for what in ("ping", "gpu_facts", "gpu_cleanup"):
            for strategy in ("linear", "free"):
                a, b = pick(runs, what, strategy, low, forks), pick(runs, what, strategy, high, forks)
                if a is None or b is None:
                    continue
                slopes.append({"what": what, "strategy": strategy, "forks": forks,
                               "wall_s_per_host": (b["wall_s"] - a["wall_s"]) / (high - low),
                               "ctrl_cpu_s_per_host": (b["ctrl_cpu_s"] - a["ctrl_cpu_s"]) / (high - low),
                               "main_cpu_s_per_host": (b["main_cpu_s"] - a["main_cpu_s"]) / (high - low),
                               "node_cpu_s_per_host": (b["node_cpu_s"] - a["node_cpu_s"]) / (high - low)})
    print("\nmarginal cost per added host, %d -> %d nodes (x ping: over ping's slope at the same forks)" % (low, high))
    srows = []
    for s in slopes:
        ping = next((p for p in slopes if p["what"] == "ping" and p["forks"] == s["forks"]), None)
        if ping is None:
            continue
        s["wall_x_ping"] = s["wall_s_per_host"] / ping["wall_s_per_host"] if ping["wall_s_per_host"] > 0 else float("nan")
        s["cpu_x_ping"] = s["ctrl_cpu_s_per_host"] / ping["ctrl_cpu_s_per_host"] if ping["ctrl_cpu_s_per_host"] > 0 else float("nan")
        srows.append([s["what"], s["strategy"], s["forks"], "%.3f" % s["wall_s_per_host"], "%.2f" % s["wall_x_ping"],
                      "%.3f" % s["ctrl_cpu_s_per_host"], "%.2f" % s["cpu_x_ping"], "%.3f" % s["main_cpu_s_per_host"],
                      "%.3f" % s["node_cpu_s_per_host"]])
    print(table(["command", "strategy", "forks", "wall s/host", "x ping", "ctrl CPU s/host", "x ping", "main CPU s/host",
                 "node CPU s/host"], srows))
    print()
    for what in ("gpu_facts", "gpu_cleanup"):
        for strategy in ("linear", "free"):
            mine = [s for s in slopes if s["what"] == what and s["strategy"] == strategy and "cpu_x_ping" in s]
            if not mine:
                continue
            ratio = sum(s["cpu_x_ping"] for s in mine) / len(mine)
            verdict = "PASS" if ratio <= RATIO_TARGET else "FAIL"
            verdicts.append({"what": what, "strategy": strategy, "cpu_x_ping": ratio, "verdict": verdict})
            print("%s %s (%s): controller CPU per added host %.2fx ping's (mean over forks; at most %.1fx)" % (
                verdict, what, strategy, ratio, RATIO_TARGET))
    for r in runs:
        if "summaries" in r:
            ok = r["summaries"] == 1 and r["no_result_lines"] == 0
            verdicts.append({"what": "gpu_cleanup summary", "strategy": r["strategy"], "nodes": r["nodes"], "forks": r["forks"],
                             "verdict": "PASS" if ok else "FAIL"})
            if not ok or r["strategy"] != "linear":
                print("%s gpu_cleanup (%s) N=%d forks=%d: the run_once summary ran %d time(s) (1 expected), %d line(s) "
                      "'NO RESULT' for hosts that had not finished yet (0 expected)" % (
                          "PASS" if ok else "FAIL", r["strategy"], r["nodes"], r["forks"], r["summaries"], r["no_result_lines"]))
    linear_ok = [r for r in runs if "summaries" in r and r["strategy"] == "linear" and r["summaries"] == 1 and not r["no_result_lines"]]
    if linear_ok:
        print("PASS gpu_cleanup (linear): the summary ran once and named every host's result in %d of %d runs" % (
            len(linear_ok), len([r for r in runs if "summaries" in r and r["strategy"] == "linear"])))
    for what in ("gpu_facts", "gpu_cleanup"):
        for free in (r for r in runs if r["what"] == what and r["strategy"] == "free"):
            lin = pick(runs, what, "linear", free["nodes"], free["forks"])
            if lin:
                print("INFO %s N=%d forks=%d: free/linear wall %.2f, controller CPU %.2f" % (
                    what, free["nodes"], free["forks"], free["wall_s"] / lin["wall_s"], free["ctrl_cpu_s"] / lin["ctrl_cpu_s"]))
    for what in ("ping", "gpu_facts", "gpu_cleanup"):
        mine = [s for s in slopes if s["what"] == what and s["strategy"] == "linear"]
        if not mine:
            continue
        ctrl = sum(s["ctrl_cpu_s_per_host"] for s in mine) / len(mine)
        main_loop = sum(s["main_cpu_s_per_host"] for s in mine) / len(mine)
        node = sum(s["node_cpu_s_per_host"] for s in mine) / len(mine)
        # a fork holds its host for the controller's share plus the host's own share of each round trip (here both
        # are CPU on different machines in a real fleet; the network's wait, not here, only adds to it)
        per_core = (ctrl + node) / ctrl if ctrl > 0 else float("nan")
        print("INFO %s: per added host %.3f s controller CPU (main loop %.3f), %.3f s node CPU: one controller core keeps "
              "about %.1f forks busy before any network wait; the main loop alone caps a controller at %.0f hosts/s" % (
                  what, ctrl, main_loop, node, per_core, 1 / main_loop if main_loop > 0 else float("inf")))
        print("INFO %s: wall per added host by forks: %s" % (
            what, ", ".join("%d: %.2f s" % (s["forks"], s["wall_s_per_host"]) for s in mine)))
    return {"slopes": slopes, "verdicts": verdicts}


def become_subreaper() -> None:
    """Orphaned ControlPersist masters become this process's children, so their CPU is reaped and counted here."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) != 0:
        raise BenchError("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d" % ctypes.get_errno())


def on_term(signum: int, _frame: t.Any) -> None:
    raise SystemExit(128 + signum)  # the finally below still ends the fleets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 32, 64], help="node counts (default 1 32 64)")
    parser.add_argument("--forks", type=int, nargs="+", default=[5, 16, 32, 64], help="forks values (capped at N)")
    parser.add_argument("--free-forks", type=int, nargs="*", default=[16],
                        help="forks values (capped at N) at which the playbooks also run with strategy free (default 16)")
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs per node (default 8)")
    parser.add_argument("--report", type=Path, help="print the summary of a saved bench/results/bench_fleet_ssh.json; run nothing")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text(encoding="utf-8"))
        report(saved["runs"], sorted({r["nodes"] for r in saved["runs"]}))
        return 0
    bad = [(name, v) for name in ("nodes", "forks", "free_forks") for v in getattr(args, name) if v < 1]
    if bad or args.gpus < 1:
        name, value = bad[0] if bad else ("gpus", args.gpus)
        parser.error("--%s must be at least 1 (got %s)" % (name.replace("_", "-"), value))
    if os.geteuid() != 0:
        print("bench_fleet_ssh: needs root (network and PID namespaces); skipped", file=sys.stderr)
        return 1
    ensure_simulator()
    become_subreaper()
    signal.signal(signal.SIGTERM, on_term)
    sizes = sorted(set(args.nodes))
    folder = Path(tempfile.mkdtemp(prefix="gpuops-benchfleetssh-"))
    fleets = Fleets(folder)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    print("%s UTC, %d CPUs, load average %s; logs in %s" % (
        started.strftime("%Y-%m-%d %H:%M"), os.cpu_count(), " ".join("%.2f" % x for x in load_before), folder), flush=True)
    runs: t.List[t.Dict[str, t.Any]] = []
    try:
        fleets.up(max(sizes), args.gpus)
        runs = measure(fleets, folder, sizes, args.forks, args.free_forks)
    finally:
        try:
            end_masters(fleets.control_dirs())
        finally:
            problems = fleets.down()
            problems += fleets.leftovers()
            if problems:
                print("FAIL teardown: %s" % "; ".join(problems), file=sys.stderr)
            else:
                print("teardown: every namespace, node process and ssh master of this bench is gone", flush=True)
    load_after = os.getloadavg()
    results = {"date": started.isoformat(), "cpus": os.cpu_count(), "gpus_per_node": args.gpus,
               "load_before": load_before, "load_after": load_after, "runs": runs}
    save_results("bench_fleet_ssh", results)  # the raw runs first: the summary below only reads them
    summary = report(runs, sizes)
    print("load average before %s, after %s" % (" ".join("%.2f" % x for x in load_before),
                                                " ".join("%.2f" % x for x in load_after)))
    save_results("bench_fleet_ssh", dict(results, **summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
