# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fleet asks of the machine: `ip` (namespaces, veth, addresses) and processes by PID and start time."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import typing as t

from gpusim.procfs import read_stat


class FleetError(Exception):
    """A step of bringing the fleet up or down failed; the message says which and why."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise FleetError("ip %s: %s" % (" ".join(args), (proc.stderr or proc.stdout).strip()))
    return proc


def netns_exists(name: str) -> bool:
    return os.path.exists("/run/netns/%s" % name)


def link_exists(name: str) -> bool:
    return os.path.exists("/sys/class/net/%s" % name)


def netns_pids(name: str) -> t.List[int]:
    """Every process whose network namespace is <name>, as PIDs of this PID namespace (`ip netns pids`)."""
    if not netns_exists(name):
        return []
    proc = ip("netns", "pids", name, check=False)
    return sorted(int(word) for word in proc.stdout.split() if word.isdigit())


def address_in_use(prefix: str) -> bool:
    """True when an address or route of the machine already lies in <prefix> (e.g. '10.213.3.')."""
    addresses = ip("-4", "-o", "addr", "show").stdout + ip("-4", "route", "show").stdout
    return prefix in addresses


def starttime(pid: int) -> t.Optional[int]:
    stat = read_stat(pid)
    return stat.starttime if stat else None


def alive(pid: int, recorded_starttime: t.Optional[int] = None) -> bool:
    """The process exists, is not a zombie, and (when given) started when recorded."""
    stat = read_stat(pid)
    if stat is None or stat.state in ("Z", "X"):
        return False
    return recorded_starttime is None or stat.starttime == recorded_starttime


def signal_recorded(pid: int, recorded_starttime: int, sig: int) -> bool:
    """Send <sig> only if <pid> is still the recorded process (PID reuse); True when sent."""
    if not alive(pid, recorded_starttime):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_and_wait(targets: t.Sequence[t.Tuple[int, int]], timeout: float = 15.0) -> t.List[int]:
    """SIGKILL each (pid, starttime) that is still that process; wait for them; return those still alive."""
    for pid, start in targets:
        signal_recorded(pid, start, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = [(pid, start) for pid, start in targets if alive(pid, start)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [(pid, start) for pid, start in left if alive(pid, start)]
    return [pid for pid, _start in left]
