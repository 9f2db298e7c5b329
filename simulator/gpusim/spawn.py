# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Starting simulated process trees that outlive the command line, and ending them by record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List

from gpusim.procs import ROLE_REAPER, ProcRecord, record_process
from gpusim.statedir import STATE_ENV, StateDir, StateError

SIMULATOR_DIR = Path(__file__).resolve().parent.parent
FAKEVLLM_DIR = SIMULATOR_DIR / "fakevllm"
REAPER_ARGV_ENV = "GPUOPS_SIM_REAPER_ARGV"
REAPER_DETACH_ENV = "GPUOPS_SIM_REAPER_DETACH"


def python3() -> str:
    """This interpreter, spelled `.../python3` where that exists (as `ps` shows real launches)."""
    candidate = Path(sys.executable).with_name("python3")
    return str(candidate) if candidate.exists() else sys.executable


def simulator_env(state: StateDir, extra: Dict[str, str]) -> Dict[str, str]:
    """The caller's environment plus the state directory and the simulator on PYTHONPATH."""
    env = dict(os.environ)
    paths = [str(FAKEVLLM_DIR), str(SIMULATOR_DIR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[STATE_ENV] = str(state.root)
    env.update(extra)
    return env


def spawn_detached(state: StateDir, argv: List[str], env: Dict[str, str], log_name: str) -> ProcRecord:
    """Start argv below a reaper in a new session, stdio to logs/<log_name>.log; returns the reaper.

    The reaper (`python3 -m gpusim.reaper`) is a child subreaper: orphans of the tree (workers of a
    SIGKILLed server) are reparented to it and reaped when they die, as systemd would on a real host.
    The command travels in the environment so the reaper's own cmdline never looks like a launcher.
    The process started here forks the reaper and exits at once, so the reaper is never the caller's
    child (a test or bench that calls this in-process does not collect it as a zombie): it belongs to
    whatever adopts orphans on this machine, as it would after `gpusim vllm` returns.
    """
    state.logs.mkdir(parents=True, exist_ok=True)
    log_path = state.logs / f"{log_name}.log"
    read_end, write_end = os.pipe()
    reaper_env = dict(env, **{REAPER_ARGV_ENV: json.dumps(argv), REAPER_DETACH_ENV: str(write_end)})
    with os.fdopen(read_end, "rb") as pipe:
        try:
            with open(log_path, "ab") as log:
                starter = subprocess.Popen(  # pylint: disable=consider-using-with  # waited for below
                    [python3(), "-m", "gpusim.reaper"],
                    env=reaper_env, cwd=str(state.root), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, pass_fds=(write_end,),
                )
        finally:
            os.close(write_end)
        told = pipe.read().decode().strip()  # the reaper's PID, once the starter has forked it and left
    starter.wait(timeout=30)
    if not told.isdigit():
        raise StateError(f"the reaper did not start (exit status {starter.returncode}):\n{log_tail(state, log_name)}")
    return record_process(state, int(told), ROLE_REAPER)


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def kill_records(records: Iterable[ProcRecord], sig: int = signal.SIGKILL) -> List[ProcRecord]:
    """Signal each recorded process that is still the same process (start time checked just before)."""
    signalled: List[ProcRecord] = []
    for record in records:
        if record.is_running():
            try:
                os.kill(record.pid, sig)
            except ProcessLookupError:
                continue
            signalled.append(record)
    return signalled


def is_gone(record: ProcRecord) -> bool:
    """Exited (a zombie cannot run any more; a reaper will collect it) or its PID now names another."""
    return not record.is_running()


def wait_gone(records: Iterable[ProcRecord], timeout: float) -> List[ProcRecord]:
    """Wait for the records to be gone; returns those still running at the deadline."""
    pending = list(records)
    wait_until(lambda: all(is_gone(record) for record in pending), timeout)
    return [record for record in pending if not is_gone(record)]


def log_tail(state: StateDir, log_name: str, lines: int = 20) -> str:
    path = state.logs / f"{log_name}.log"
    if not path.exists():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
