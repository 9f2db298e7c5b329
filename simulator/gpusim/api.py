# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpusim's public Python API: what tests and benches use to drive a simulated host and read it back.

A `Host` is one state directory. Everything it starts is recorded in `procs/` and ended by `cleanup()`
(by recorded PID and start time, never by name). Its readings (`status`, `used_mib`, `holders`) are the
simulator's own view of the GPUs, computed from the allocation records and /proc: independent of NVML,
nvidia-ml-py and anything the collection says. The liveness helpers read /proc and nothing else.

    from gpusim.api import Host, pid_alive
    host = Host.create(tmp_path / "host", gpus=8)
    tree = host.spawn_vllm(tp=8, mib=93029)
    ...  # run the code under test with host.environment()
    assert host.used_mib() == [0] * 8 and not pid_alive(tree["workers"][0])
    host.cleanup()

The `gpusim` command line is a thin layer over the same functions; `Host.gpusim()` runs it, for tests that
check the command itself. `FakeVllm` starts and stops a fake vLLM API server as an operator or a role would
(`vllm serve MODEL ...`), as a child of the caller, and reads its own answers (/health, /metrics, /sim/*).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from gpusim import procfs
from gpusim.allocs import Alloc, register_own_alloc, write_alloc
from gpusim.cleanup import cleanup as _cleanup
from gpusim.devices import DEVICE_DIR_ENV
from gpusim.gpus import DEFAULT_NAME, DEFAULT_RESERVED_MIB, DEFAULT_TOTAL_MIB
from gpusim.host import create_host, read_host, set_host_key
from gpusim.incident import replay_incident
from gpusim.inventory import host_vars as _host_vars
from gpusim.inventory import role_inventory as _role_inventory
from gpusim.procs import ProcRecord, read_records
from gpusim.scenarios import add_foreign, set_driver_loaded, set_lost, set_orphan
from gpusim.spawn import FAKEVLLM_DIR, SIMULATOR_DIR, wait_until
from gpusim.statedir import StateDir, StateError, resolve_state
from gpusim.status import collect_status
from gpusim.stuck import spawn_stuck
from gpusim.tree import spawn_tree
from gpusim.vllm_tree import DEFAULT_MODEL, DEFAULT_WORKER_MIB, TreeSpec, spawn_vllm

SIM_LIB_DIR = SIMULATOR_DIR / "build" / "lib"
SIM_BIN_DIR = SIMULATOR_DIR / "build" / "bin"
FAKE_VLLM = FAKEVLLM_DIR / "bin" / "vllm"  # the fake `vllm` console script (run it with an interpreter that has setproctitle)

__all__ = [
    "Host", "FakeVllm", "GpusimError", "StateError", "SIMULATOR_DIR", "SIM_LIB_DIR", "SIM_BIN_DIR", "FAKEVLLM_DIR",
    "FAKE_VLLM", "free_port", "pid_alive", "pid_exists", "starttime", "proc_state", "parent_pid", "children", "title",
    "pid_namespace", "namespace_pids", "in_pid_namespace", "orphan_parent", "hold_memory", "run_gpusim",
    "role_host_vars", "role_inventory", "wait_for",
]


class GpusimError(AssertionError):
    """The `gpusim` command failed (an AssertionError, so a test that drives it fails with its output)."""


# ---- liveness, from /proc alone ---------------------------------------------------------------------------


# free_port()'s ports: below the kernel's ephemeral range (32768-60999 by default), where neither bind(0) nor a client's
# source port lands, in blocks of their own for each pytest-xdist worker (gw0, gw1, ...; anything else takes the last)
PORT_BASE = 20000
PORT_BLOCK = 1500
PORT_BLOCKS = 8
_next_port: List[int] = []


def _port_block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else PORT_BLOCKS - 1
    return PORT_BASE + (index % PORT_BLOCKS) * PORT_BLOCK


def free_port() -> int:
    """A TCP port that nothing is bound to right now (for a fake server a test or bench starts), never one this
    process handed out in its last PORT_BLOCK calls, nor one another xdist worker of the run hands out. A port bind(0)
    gives is in the range the kernel also gives other tests' probes and every client's source port: two tests could
    be told the same port, and one's server would find it taken (or answer for the other's)."""
    low = _port_block()
    if not _next_port:
        _next_port.append(low + (os.getpid() * 7919) % PORT_BLOCK)
    for _attempt in range(PORT_BLOCK):
        port = low + (_next_port[0] - low) % PORT_BLOCK
        _next_port[0] = port + 1
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise GpusimError("no free TCP port in %d-%d" % (low, low + PORT_BLOCK - 1))


def starttime(pid: int) -> Optional[int]:
    """Field 22 of /proc/PID/stat (clock ticks since boot), None when the PID does not exist."""
    return procfs.starttime(pid)


def proc_state(pid: int) -> Optional[str]:
    """The state letter of /proc/PID/stat (R, S, D, Z, ...), None when the PID does not exist."""
    stat = procfs.read_stat(pid)
    return stat.state if stat else None


def parent_pid(pid: int) -> Optional[int]:
    stat = procfs.read_stat(pid)
    return stat.ppid if stat else None


def children(pid: int) -> List[int]:
    """The PIDs whose parent is `pid`, in PID order."""
    return procfs.children(pid)


def pid_namespace(pid: Optional[int] = None) -> Optional[int]:
    """The inode of /proc/PID/ns/pid (this process's without a PID): its PID namespace, the same number from every
    namespace; None when the PID does not exist."""
    return procfs.pid_namespace(pid)


def namespace_pids(pid: int) -> List[int]:
    """The process's PID in each PID namespace it is in (NSpid of /proc/PID/status): this /proc's first, its own
    namespace's last (`[host_pid, 1]` for PID 1 of a container); [] when the PID does not exist."""
    return procfs.namespace_pids(pid)


def pid_exists(pid: int, start: Optional[int] = None) -> bool:
    """The PID exists (a zombie too); with `start`, it is still the process that had that start time."""
    stat = procfs.read_stat(pid)
    return stat is not None and (start is None or stat.starttime == start)


def pid_alive(pid: int, start: Optional[int] = None) -> bool:
    """The PID runs (a zombie counts as gone); with `start`, it is still the same process (no reuse)."""
    stat = procfs.read_stat(pid)
    return stat is not None and stat.state not in ("Z", "X") and (start is None or stat.starttime == start)


def title(pid: int) -> str:
    """The command line as ps shows it ([comm] for a zombie), "" when gone."""
    return procfs.title(pid)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll `condition` until it is true (True) or `timeout` seconds pass (False)."""
    return wait_until(condition, timeout, interval)


def orphan_parent() -> int:
    """Where this machine sends an orphan of a process started here: PID 1, or the nearest subreaper above us.

    Measured, not assumed: a child forks a grandchild and exits at once; the grandchild prints its new
    parent. Both are ours and end within a second.
    """
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    time.sleep(0.3)\n"
            "    print(os.getppid(), flush=True)\n"
            "os._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10, check=True)
    return int(done.stdout.strip())


# ---- the command line, a process's own memory, the role's inventory ------------------------------------------


def simulator_environ(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """`env` (default: this process's environment) with simulator/ first on PYTHONPATH, so `-m gpusim` is found."""
    merged = dict(os.environ if env is None else env)
    merged["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SIMULATOR_DIR), merged.get("PYTHONPATH")]))
    return merged


def run_gpusim(*args: str, env: Optional[Mapping[str, str]] = None, check: bool = True,
               timeout: float = 120) -> "subprocess.CompletedProcess[str]":
    """`python -m gpusim ARGS...` with this interpreter; raises GpusimError (with its output) when check and it fails."""
    done = subprocess.run([sys.executable, "-m", "gpusim", *args], env=simulator_environ(env), capture_output=True,
                          text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise GpusimError(f"gpusim {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def in_pid_namespace(argv: Sequence[str]) -> List[str]:
    """argv run as PID 1 of a new PID namespace with its own /proc, as a container runs its command (`unshare --pid
    --fork --mount-proc --kill-child`, needs root): what it records on a host, the fake NVML reports under its host
    PIDs. The unshare process waits for the command and SIGKILLs it when unshare dies first, which ends the whole
    namespace; unshare passes no signal on, so signal the command by its host PID, unshare's one child (`children`)."""
    return ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--", *argv]


def hold_memory(gpu: int, mib: int, state: Optional[Union[str, Path]] = None, flags: Sequence[str] = ()) -> None:
    """Let the CALLING process hold `mib` on `gpu` of the host `state` (default $GPUOPS_SIM_STATE), with its device
    files open, until it exits: a bystander (a training job, say) that a test starts as its own script."""
    register_own_alloc(resolve_state(None if state is None else str(state)), gpu, mib, tuple(flags))


def role_host_vars(state: Union[str, Path], port: int, **extra: Any) -> Dict[str, Any]:
    """The vllm_server role's variables for one simulated host: its port, state directory, simulated GPUs."""
    return _host_vars(Path(state), port, **extra)


def role_inventory(hosts: Mapping[str, Dict[str, Any]], python: Optional[str] = None, **group_vars: Any) -> Dict[str, Any]:
    """An inventory (as a dict) whose group vllm_servers holds `hosts` (name -> role_host_vars), local connection."""
    return _role_inventory(hosts, python=python, **group_vars)


# ---- a simulated host ---------------------------------------------------------------------------------------


class Host:
    """One simulated GPU host (a state directory), driven in-process through gpusim's own functions."""

    def __init__(self, state: Union[str, Path], env: Optional[Mapping[str, str]] = None) -> None:
        self.statedir = StateDir(Path(state))
        self.state: Path = self.statedir.root  # the state directory (absolute)
        self.tree_env: Dict[str, str] = dict(env or {})  # more environment for every tree this host starts

    @classmethod
    def create(cls, state: Union[str, Path], gpus: int = 8, *, memory_mib: int = DEFAULT_TOTAL_MIB,
               reserved_mib: int = DEFAULT_RESERVED_MIB, name: str = DEFAULT_NAME, topology: str = "pcie",
               orphans: str = "reaper", subreaper_title: str = "", force: bool = False,
               env: Optional[Mapping[str, str]] = None) -> "Host":
        host = cls(state, env)
        create_host(host.statedir, gpus, memory_mib, reserved_mib, name, topology, force, orphans, subreaper_title)
        return host

    # -- what a process on this host needs to see it

    def environment(self, nvidia_smi: bool = False) -> Dict[str, str]:
        """The variables that point the REAL nvidia-ml-py (and, with nvidia_smi, PATH's nvidia-smi) at this host, and
        readers of /dev/nvidia* at its device files."""
        env = {"LD_LIBRARY_PATH": str(SIM_LIB_DIR), "GPUOPS_SIM_STATE": str(self.state),
               DEVICE_DIR_ENV: str(self.statedir.dev)}
        if nvidia_smi:
            env["PATH"] = os.pathsep.join([str(SIM_BIN_DIR), os.environ.get("PATH", "")])
        return env

    # -- the simulator's own readings (independent of NVML and of the code under test)

    def status(self) -> Dict[str, Any]:
        """What `gpusim status --json` prints: per GPU used/free MiB and live holders; recorded processes."""
        return collect_status(self.statedir)

    def used_mib(self) -> List[int]:
        """Memory in use per GPU, in index order (allocations of live holders + memory held by no process)."""
        return [int(gpu["used_mib"]) for gpu in self.status()["gpus"]]

    def holders(self, gpu: Optional[int] = None) -> List[int]:
        """PIDs whose allocation still counts, on one GPU or on any."""
        gpus = self.status()["gpus"]
        return sorted({holder["pid"] for g in gpus if gpu is None or g["index"] == gpu for holder in g["holders"]})

    def snapshot(self) -> Dict[str, Any]:
        """Per GPU used MiB and holder PIDs, and each recorded process still running with its start time.

        Two equal snapshots mean nothing was freed, ended or started in between (check mode's promise).
        """
        status = self.status()
        return {
            "used_mib": [gpu["used_mib"] for gpu in status["gpus"]],
            "holders": [sorted(holder["pid"] for holder in gpu["holders"]) for gpu in status["gpus"]],
            "running": sorted((record.pid, record.starttime) for record in read_records(self.statedir) if record.is_running()),
        }

    def nested_pid_namespace(self, argv: Sequence[str]) -> Tuple[List[str], Dict[str, str]]:
        """argv run inside a new PID namespace (`unshare --pid --fork --mount-proc`, needs root), and the variables
        that keep the fake NVML's view of the machine's PIDs (a driver knows them whatever the caller's namespace).

        The machine's procfs stays readable to the library through a bind mount in a private mount namespace
        (`<state>/outer-proc`, gone with the namespace); the command's own /proc shows only its namespace.
        """
        outer = self.state / "outer-proc"
        outer.mkdir(exist_ok=True)
        wrapped = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                   'mount --bind /proc "$0" && exec unshare --pid --fork --mount-proc "$@"', str(outer), *argv]
        return wrapped, {"GPUOPS_SIM_PROC_ROOT": str(outer)}

    def device_holders(self) -> Dict[int, List[str]]:
        """PID -> this host's device files it holds open, read from /proc/PID/fd (what fuser would say)."""
        prefix = str(self.statedir.dev) + os.sep
        found: Dict[int, List[str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fds = os.listdir(f"/proc/{entry}/fd")
            except OSError:  # gone, or not ours to read
                continue
            links = []
            for fd in fds:
                try:
                    links.append(os.readlink(f"/proc/{entry}/fd/{fd}"))
                except OSError:  # closed meanwhile
                    pass
            held = sorted({link for link in links if link.startswith(prefix)})
            if held:
                found[int(entry)] = held
        return found

    def gpusim(self, command: str, *args: str, check: bool = True,
               env: Optional[Mapping[str, str]] = None) -> "subprocess.CompletedProcess[str]":
        """The command line on this host: `python -m gpusim COMMAND --state DIR ARGS...` (tree_env in its environment)."""
        merged = dict(os.environ if env is None else env, **self.tree_env)
        return run_gpusim(command, "--state", str(self.state), *args, env=merged, check=check)

    def gpusim_json(self, command: str, *args: str) -> Any:
        """The JSON a `gpusim` command prints (vllm, tree, status --json, ...)."""
        return json.loads(self.gpusim(command, *args).stdout)

    def host_keys(self) -> Dict[str, str]:
        return read_host(self.statedir)

    def records(self) -> List[ProcRecord]:
        """Every process this host's simulator started (pid, start time, role)."""
        return read_records(self.statedir)

    # -- starting things

    def spawn_vllm(self, tp: int = 8, *, first_gpu: int = 0, gpus: Optional[Sequence[int]] = None,
                   mib: int = DEFAULT_WORKER_MIB, engine_core: bool = False, entrypoint: str = "api_server",
                   model: str = DEFAULT_MODEL, ignore_sigterm: bool = False, port: Optional[int] = None,
                   wrapper: Optional[str] = None, sibling: Optional[str] = None,
                   env: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
        """A fake vLLM tree (as `gpusim vllm`); returns parent, engine_core, workers, gpus, reaper, wrapper, sibling."""
        spec = TreeSpec(gpus=list(gpus) if gpus is not None else list(range(first_gpu, first_gpu + tp)),
                        worker_mib=mib, engine_core=engine_core, entrypoint=entrypoint, model=model,
                        ignore_sigterm=ignore_sigterm, port=port, wrapper=wrapper, sibling=sibling,
                        env=dict(self.tree_env, **(env or {})))
        return spawn_vllm(self.statedir, spec)

    def spawn_tree(self, root: Dict[str, Any]) -> Dict[str, int]:
        """Any titled process tree (as `gpusim tree`, see gpusim/tree.py); returns {key: pid}."""
        return spawn_tree(self.statedir, json.loads(json.dumps(root)))

    def spawn_stuck(self, gpu: int, mib: int = 4096) -> Dict[str, Any]:
        """A holder that no signal frees (a zombie with a sticky allocation); returns keeper and holder."""
        return spawn_stuck(self.statedir, gpu, mib)

    def record_alloc(self, pid: int, gpu: int, mib: int, flags: Sequence[str] = ()) -> None:
        """Let a running process hold `mib` on `gpu` (its allocation record, with its start time now): a cheap
        holder for large shapes (a `sleep` the caller started), listed by NVML like a worker."""
        start = starttime(pid)
        if start is None:
            raise StateError(f"PID {pid} is not running")
        write_alloc(self.statedir, Alloc(pid, start, gpu, mib, "C", tuple(flags)))

    # -- faults

    def incident(self, parent: Optional[int] = None) -> List[Dict[str, object]]:
        """The broken cleanup: SIGKILL the API server and the first listed worker."""
        return replay_incident(self.statedir, parent)

    def foreign(self, gpu: int, mib: int, pid: Optional[int] = None, not_available: bool = False) -> int:
        return add_foreign(self.statedir, gpu, mib, pid, not_available).pid

    def orphan(self, gpu: int, mib: int) -> None:
        set_orphan(self.statedir, gpu, mib)

    def lose_gpu(self, gpu: int, lost: bool = True) -> None:
        set_lost(self.statedir, gpu, lost)

    def driver(self, loaded: bool) -> None:
        set_driver_loaded(self.statedir, loaded)

    def teardown_lag(self, ms: int) -> None:
        if ms < 0:
            raise StateError("teardown lag must not be negative")
        set_host_key(self.statedir, "teardown_lag_ms", str(ms))

    # -- ending things

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal a process this host's simulator started (refuses any other PID, and a reused one)."""
        recorded = {record.pid: record for record in read_records(self.statedir)}
        if pid not in recorded or not recorded[pid].is_same_process():
            raise StateError(f"PID {pid} is not a process this simulated host started")
        os.kill(pid, sig)

    def cleanup(self, remove: bool = False) -> Dict[str, object]:
        """SIGKILL every recorded process still running (start time checked) and wait; raises if one is left."""
        if not self.statedir.procs.is_dir():
            return {"killed": [], "left": []}
        result = _cleanup(self.statedir, remove=remove)
        if result["left"]:
            raise StateError(f"still running after SIGKILL: {result['left']}")
        return result


# ---- a fake vLLM API server, started as a role or an operator starts vLLM ---------------------------------


class FakeVllm:
    """`vllm serve MODEL --tensor-parallel-size N --port P ARGS...` (the fake vLLM) on a simulated host, started by
    the caller as its own child in a new session, stopped and reaped by its Popen handle (its tree records itself
    in the host's procs/, so `host.cleanup()` ends whatever a failed stop leaves).

    The server's environment is the caller's without any GPUOPS_SIM_* knob or NCCL_PROTO (nothing leaks in from a
    shell), plus what the host needs (`host.environment()`, `host.tree_env`), CUDA_VISIBLE_DEVICES, each worker's
    memory, and `env` (the serving knobs of docs/simulator.md). Its readings are its own answers: /health, /metrics
    (`counter()`), /sim/pace, /sim/faults.

        server = FakeVllm(host, tmp_path / "server.log", gpus="0,1", env={"GPUOPS_SIM_TTFT_MS": "50"}).start()
        try:
            server.wait_ready()
            ...
        finally:
            server.stop()
    """

    def __init__(self, host: Host, log: Union[str, Path], *, gpus: str = "0", model: str = "org/model",
                 env: Optional[Mapping[str, str]] = None, args: Sequence[str] = (), port: Optional[int] = None,
                 worker_mib: int = 4096, engine_core: bool = False, cpu: Optional[int] = None,
                 pid_namespace: bool = False) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log)
        self.model = model
        self.cpu = cpu  # pin the server to this CPU (a bench keeps its client on another)
        self.env = {key: value for key, value in simulator_environ().items()
                    if not key.startswith("GPUOPS_SIM_") and key != "NCCL_PROTO"}
        self.env.update(host.environment(), **host.tree_env)
        self.env.update(CUDA_VISIBLE_DEVICES=gpus, GPUOPS_SIM_WORKER_MIB=str(worker_mib),
                        GPUOPS_SIM_ENGINE_CORE="1" if engine_core else "0", **(env or {}))
        self.argv = [sys.executable, str(FAKE_VLLM), "serve", model, "--tensor-parallel-size",
                     str(len(gpus.split(","))), "--port", str(self.port), *args]
        if pid_namespace:  # as in a container: the server is PID 1 of its own PID namespace, below unshare
            self.argv = in_pid_namespace(self.argv)
        self.pid_namespace = pid_namespace
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.server: Optional[Tuple[int, int]] = None  # (host PID, start time) of the server in its PID namespace
        self.launched = 0.0

    def start(self) -> "FakeVllm":
        pin: Optional[Callable[[], None]] = None
        if self.cpu is not None:
            cpus = {self.cpu}

            def pin() -> None:  # in the child, before exec
                os.sched_setaffinity(0, cpus)
        with open(self.log, "ab") as out:
            # ended by stop(); the affinity is set in the child before exec, where no thread of ours runs
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with,subprocess-popen-preexec-fn
                self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=pin)
        self.launched = time.monotonic()
        if self.pid_namespace:
            self.server = self._namespace_init()
        return self

    def _namespace_init(self) -> Optional[Tuple[int, int]]:
        """(host PID, start time) of unshare's one child, the server; None when unshare ended before it was seen."""
        assert self.proc is not None
        deadline = time.monotonic() + 10
        while self.proc.poll() is None:
            for pid in procfs.children(self.proc.pid):
                start = procfs.starttime(pid)
                if start is not None:
                    return pid, start
            if time.monotonic() > deadline:
                raise GpusimError(f"unshare started no PID namespace in 10 s:\n{self.log_text()}")
            time.sleep(0.01)
        return None

    def __enter__(self) -> "FakeVllm":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        """The API server's PID (the host's; in a PID namespace of its own, unshare's child)."""
        if self.proc is None:
            raise GpusimError("the fake vLLM server was never started")
        if self.pid_namespace:
            if self.server is None:
                raise GpusimError(f"the fake vLLM server's PID namespace ended at once:\n{self.log_text()}")
            return self.server[0]
        return self.proc.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> Optional[int]:
        """Signal the server (never anything else) and reap it; SIGKILL if it outlives `timeout`. Its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.server is None:
                os.kill(self.proc.pid, sig)
            elif pid_exists(*self.server):  # in its own PID namespace: the server itself (unshare passes no signal on)
                os.kill(self.server[0], sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                if self.server is not None and pid_exists(*self.server):
                    os.kill(self.server[0], signal.SIGKILL)  # PID 1 of its namespace: the whole namespace ends
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    # -- its own answers

    def connection(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0, raw: Optional[bytes] = None,
                headers: Optional[Mapping[str, str]] = None) -> Tuple[int, bytes]:
        """(status, body) of one request on a connection of its own (http.client: an HTTP error status is returned,
        a cut connection raises as http.client does)."""
        conn = self.connection(timeout)
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            sent = dict(headers or {})
            if data is not None:
                sent.setdefault("Content-Type", "application/json")
            conn.request(method, path, data, sent)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        status, data = self.request("GET", path)
        if status != 200:
            raise GpusimError(f"GET {path}: {status} {data!r}")
        return json.loads(data)

    def post_json(self, path: str, body: Any) -> Any:
        status, data = self.request("POST", path, body)
        if status != 200:
            raise GpusimError(f"POST {path}: {status} {data!r}")
        return json.loads(data)

    def health(self) -> int:
        """/health's status, 0 while nothing answers."""
        try:
            return self.request("GET", "/health", timeout=5)[0]
        except OSError:
            return 0

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until /health answers 200; raises GpusimError with the server's log if it exits or the time runs out."""
        deadline = time.monotonic() + timeout
        while self.health() != 200:
            if self.proc is not None and self.proc.poll() is not None:
                raise GpusimError(f"the fake vLLM server exited ({self.proc.returncode}):\n{self.log_text()}")
            if time.monotonic() > deadline:
                raise GpusimError(f"the fake vLLM server was not ready after {timeout} s:\n{self.log_text()}")
            time.sleep(0.05)

    def metrics(self) -> Dict[str, float]:
        """`name{labels}` -> value for every sample line of /metrics."""
        status, data = self.request("GET", "/metrics")
        if status != 200:
            raise GpusimError(f"GET /metrics: {status}")
        samples = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        return samples

    def counter(self, name: str, model: Optional[str] = None) -> float:
        """The sum of a /metrics family's samples (`vllm:generation_tokens_total`, ...), for one served model name
        when given: the server's own count, for judging what a client claims."""
        found = [value for sample, value in self.metrics().items() if sample == name or sample.startswith(name + "{")
                 if model is None or f'model_name="{model}"' in sample]
        if not found:
            raise GpusimError(f"no {name} samples{'' if model is None else ' for ' + model} in /metrics")
        return sum(found)

    def sent(self, after: int = 0) -> List[Dict[str, Any]]:
        """The server's own record of what it wrote for each generation request that ended, and when (GET /sim/sent):
        id, endpoint, stream, prompt_tokens, cached_tokens (found in the prefix cache), output_tokens, chunks
        ([ms since arrival, tokens] per write), finished_ms."""
        return list(self.get_json(f"/sim/sent?after={after}")["requests"])

    def pace_at(self, concurrency: int) -> float:
        """The per-stream tokens/s the server really schedules at `concurrency` streams (GET /sim/pace)."""
        return float(self.get_json(f"/sim/pace?concurrency={concurrency}")["tokens_per_s_at"])
