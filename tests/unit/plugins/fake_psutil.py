# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small stand-in for ``psutil``: a process table that records every signal and reacts on a clock.

Each row says how its process reacts to a signal: ``on_signal[number] = (what, delay)``, where ``what`` is
"exit" (the row leaves the table ``delay`` seconds later) or "zombie" (its status becomes zombie); a signal
without an entry is ignored. ``denied`` rows raise AccessDenied on any signal. Like psutil, a handle whose
PID now names another process (another start time) is not running and refuses signals. The children of a
process that exits are adopted by PID 1.
"""

from __future__ import annotations

import contextlib
import typing as t

STATUS_ZOMBIE = "zombie"
TERM, KILL = 15, 9
OBEYS = {TERM: ("exit", 0.0), KILL: ("exit", 0.0)}
IGNORES_TERM = {KILL: ("exit", 0.0)}


class Error(Exception):
    """psutil.Error: the base of its exceptions."""


class NoSuchProcess(Error):
    pass


class AccessDenied(Error):
    pass


class Row:
    """One process of the fake table."""

    def __init__(self, pid: int, ppid: int, name: str, cmdline: t.Optional[t.List[str]] = None, create_time: float = 1000.0,
                 username: str = "vllm", status: str = "sleeping", on_signal: t.Optional[t.Dict[int, t.Tuple[str, float]]] = None,
                 denied: bool = False, pgid: t.Optional[int] = None, spawn: t.Optional["Row"] = None) -> None:
        self.pid = pid
        self.pgid = pgid  # None: its own group
        self.spawn = spawn  # forked (a respawn) when it reacts to a signal by exiting
        self.ppid = ppid
        self.name = name
        self.cmdline = [name] if cmdline is None else cmdline
        self.create_time = create_time
        self.username = username
        self.status = status
        self.on_signal = OBEYS if on_signal is None else on_signal
        self.denied = denied
        self.due: t.Optional[t.Tuple[str, float]] = None  # (what, when) after a signal that it reacts to


class FakePsutil:
    """Plays the ``psutil`` module: pass an instance where the code expects the module."""

    Error = Error
    NoSuchProcess = NoSuchProcess
    AccessDenied = AccessDenied
    STATUS_ZOMBIE = STATUS_ZOMBIE

    def __init__(self, rows: t.Iterable[Row], clock: t.Callable[[], float], on_exit: t.Callable[[int], None] = lambda pid: None) -> None:
        self.table = {row.pid: row for row in rows}
        self.clock = clock
        self.on_exit = on_exit
        self.signals: t.List[t.Tuple[int, int]] = []  # (pid, signal number), in the order sent

    def settle(self) -> None:
        """Apply every reaction that is due by now."""
        now = self.clock()
        for row in list(self.table.values()):
            if row.due is not None and row.due[1] <= now:
                what, _when = row.due
                row.due = None
                if what == "exit":
                    del self.table[row.pid]
                    if row.spawn is not None:
                        self.table[row.spawn.pid] = row.spawn
                    for orphan in self.table.values():
                        if orphan.ppid == row.pid:
                            orphan.ppid = 1  # adopted by init, as the kernel does
                    self.on_exit(row.pid)
                else:
                    row.status = STATUS_ZOMBIE

    def getpgid(self, pid: int) -> t.Optional[int]:
        row = self.table.get(pid)
        return None if row is None else (row.pgid or row.pid)

    def signalled(self, pid: int) -> t.List[int]:
        return [number for spid, number in self.signals if spid == pid]

    def Process(self, pid: int) -> "FakeProcess":  # psutil spells it so
        self.settle()
        if pid not in self.table:
            raise NoSuchProcess(pid)
        return FakeProcess(self, pid, self.table[pid].create_time)

    def pids(self) -> t.List[int]:
        self.settle()
        return sorted(self.table)

    def process_iter(self, attrs: t.Sequence[str], ad_value: t.Any = None) -> t.Iterator["FakeProcess"]:
        for pid in self.pids():
            proc = self.Process(pid)
            proc.info = proc.as_dict(attrs)
            yield proc


class FakeProcess:
    """A psutil.Process: bound to the PID and the start time it had when it was made."""

    def __init__(self, host: FakePsutil, pid: int, create_time: float) -> None:
        self.host = host
        self.pid = pid
        self._create_time = create_time
        self.info: t.Dict[str, t.Any] = {}

    def _row(self) -> Row:
        self.host.settle()
        row = self.host.table.get(self.pid)
        if row is None or row.create_time != self._create_time:
            raise NoSuchProcess(self.pid)
        return row

    def create_time(self) -> float:
        return self._create_time

    def is_running(self) -> bool:
        try:
            self._row()
        except NoSuchProcess:
            return False
        return True

    def status(self) -> str:
        return self._row().status

    def name(self) -> str:
        return self._row().name

    def username(self) -> str:
        return self._row().username

    def send_signal(self, number: int) -> None:
        row = self._row()
        if row.denied:
            raise AccessDenied(self.pid)
        self.host.signals.append((self.pid, number))
        reaction = row.on_signal.get(number)
        if reaction is not None and row.status != STATUS_ZOMBIE:
            what, delay = reaction
            when = self.host.clock() + delay
            if row.due is None or when < row.due[1]:
                row.due = (what, when)

    def parents(self) -> t.List["FakeProcess"]:
        chain = []
        ppid = self._row().ppid
        while ppid in self.host.table:
            chain.append(self.host.Process(ppid))
            ppid = self.host.table[ppid].ppid
        return chain

    def cmdline(self) -> t.List[str]:
        return list(self._row().cmdline)

    def oneshot(self) -> t.ContextManager[None]:
        return contextlib.nullcontext()

    def children(self, recursive: bool = False) -> t.List["FakeProcess"]:
        self._row()
        found = [self.host.Process(row.pid) for row in sorted(self.host.table.values(), key=lambda r: r.pid) if row.ppid == self.pid]
        return found + [grandchild for child in found for grandchild in child.children(True)] if recursive else found

    def as_dict(self, attrs: t.Sequence[str], ad_value: t.Any = None) -> t.Dict[str, t.Any]:
        row = self._row()
        values = {"name": row.name, "cmdline": list(row.cmdline), "username": row.username, "create_time": row.create_time,
                  "status": row.status, "ppid": row.ppid}
        return {attr: values.get(attr, ad_value) for attr in attrs}


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: t.List[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


ME = 52  # this module's PID in the fake table: tests patch _host.process_table's os.getpid() to return it
VLLM_SERVE = ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/llama", "--tensor-parallel-size"]


def host_rows() -> t.List[Row]:
    """PID 1, the Ansible connection (sshd -> python -> ME), a canary, a "vllm" look-alike holding no GPU, the driver's helper."""
    return [
        Row(1, 0, "systemd", ["/sbin/init"], username="root"),
        Row(50, 1, "sshd", ["sshd: ops@notty"], username="root"),
        Row(51, 50, "python3", ["/usr/bin/python3", "/home/ops/.ansible/tmp/AnsiballZ_gpu_reclaim.py"], username="ops"),
        Row(ME, 51, "python3", ["/usr/bin/python3", "-m", "ansible_collections.gpuops.fleet.plugins.modules.gpu_reclaim"], username="ops"),
        Row(900, 1, "sleep", ["sleep", "3600"]),
        Row(901, 1, "vllm", ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "--help"]),
        Row(902, 1, "nvidia-persistenced", ["/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced"], username="root"),
    ]


def vllm_server(launcher: int, gpus: t.Sequence[int], engine_core: bool = True, parent: int = 1,
                **worker: t.Any) -> t.Tuple[t.List[Row], t.Dict[int, int]]:
    """vLLM's tree: API server [-> VLLM::EngineCore] -> one VLLM::Worker_TP<i> per GPU, and a resource tracker.

    Returns the rows and worker pid -> the GPU it holds. Worker pids are launcher + 10 + i.
    """
    rows = [Row(launcher, parent, "python3", VLLM_SERVE + [str(len(gpus))]),
            Row(launcher + 2, launcher, "python3", ["/usr/bin/python3", "-c", "from multiprocessing.resource_tracker import main;main(5)"])]
    workers_parent = launcher
    if engine_core:
        rows.append(Row(launcher + 1, launcher, "VLLM::EngineCore", ["VLLM::EngineCore"]))
        workers_parent = launcher + 1
    held = {}
    for rank, gpu in enumerate(gpus):
        pid = launcher + 10 + rank
        rows.append(Row(pid, workers_parent, "VLLM::Worker_TP%d" % rank, ["VLLM::Worker_TP%d" % rank], **worker))
        held[pid] = gpu
    return rows, held
