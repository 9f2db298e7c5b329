# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PID 1 of a fleet node (standard library only; run by path: `python nodeinit.py CONFIG.json`).

Started by `unshare --pid --fork --mount-proc --uts` inside the node's network namespace, it:
sets the node's host name; bind-mounts the node's own /etc files (hosts, passwd, group, shadow, sudoers.d),
/home and the skeletons that open the way to the Python (e.g. over /root) over the machine's, in the node's
private mount namespace only; starts sshd; and reaps every orphan, as
an init does. Signals from the machine: SIGUSR1 stops sshd (the listener and every session below it, so the
node is unreachable), SIGUSR2 starts it again, SIGTERM ends the node (when PID 1 exits, the kernel ends
every other process of the PID namespace).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import typing as t


class Stop(Exception):
    """SIGTERM or SIGINT: leave the reaping loop (a blocked waitpid is retried after a handler that returns)."""


class Node:
    def __init__(self, config: t.Dict[str, t.Any]) -> None:
        self.config = config
        self.sshd: t.Optional[int] = None

    def setup(self) -> None:
        socket.sethostname(self.config["hostname"])
        mount_binds(self.config["binds"])
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)

    def start_sshd(self) -> None:
        if self.sshd is not None:
            return
        with open(self.config["sshd_log"], "ab") as log:
            self.sshd = subprocess.Popen(self.config["sshd"], stdin=subprocess.DEVNULL, stdout=log, stderr=log).pid

    def stop_sshd(self) -> None:
        """End the listener and every process below it (the per-connection sshd sessions and their commands)."""
        if self.sshd is None:
            return
        below = descendants(self.sshd)
        for pid in [self.sshd, *below]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.sshd = None

    def on_signal(self, signum: int, _frame: t.Any) -> None:
        if signum == signal.SIGUSR1:
            self.stop_sshd()
        elif signum == signal.SIGUSR2:
            self.start_sshd()
        else:
            raise Stop()

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(signum, self.on_signal)
        try:
            self.setup()
            self.start_sshd()
            while True:
                try:
                    pid, _status = os.waitpid(-1, 0)
                except ChildProcessError:
                    signal.pause()
                    continue
                if pid == self.sshd:
                    self.sshd = None
        except Stop:
            pass
        self.stop_sshd()
        return 0


def mount_binds(binds: t.Sequence[t.Sequence[str]]) -> None:
    """Bind each (source, target), in order; (source, target, "rbind"): a skeleton with the binds made inside it
    (nodefiles.reach_binds)."""
    for source, target, *how in binds:
        subprocess.run(["mount", "--rbind" if "rbind" in how else "--bind", source, target], check=True)


def descendants(root: int) -> t.List[int]:
    parents: t.Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
    found: t.List[int] = []
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found.append(pid)
                todo.append(pid)
    return found


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    if os.getpid() != 1:
        print("nodeinit: must be PID 1 of a new PID namespace", file=sys.stderr)
        return 2
    started = time.time()
    code = Node(config).run()
    print("nodeinit: %s ends after %.0f s" % (config["hostname"], time.time() - started), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
