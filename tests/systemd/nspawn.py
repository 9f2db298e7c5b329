# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A contained systemd for tests: a Debian bookworm root of its own (debootstrap, cached as a tarball under
build/ and unpacked once beside it), booted with `systemd-nspawn -b`, and ended by its recorded PIDs.

systemd only ever sees that root: nspawn pivots into it before systemd starts, gives it its own /tmp (tmpfs),
/run, PID, mount, UTS, IPC and network namespaces, and the host lends it only read-only paths (the managed
host's Python packages, the simulator, one .pth file). Nothing of the host's /, /tmp, /var or /run is bound in.
The unpacked root itself is never written: each boot lays a tmpfs over it (--volatile=overlay), so every run
starts from the same pristine system and leaves nothing behind.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import time
import typing as t
from pathlib import Path

from containers import cached_tarball

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "build" / "systemd-test"
SUITE = "bookworm"
# what the managed host needs beyond minbase: systemd as PID 1, its bus, and the Python the modules run with
PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
INSIDE_PYTHON = "/usr/bin/python3"
INSIDE = Path(__file__).resolve().parent / "inside.py"
INSIDE_PTH = "/usr/lib/python3/dist-packages/gpuops-test-host.pth"


class ContainerError(Exception):
    """The contained systemd could not be built, booted or reached; the message says what and where."""


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses for the main archive ($GPUOPS_DEBIAN_MIRROR overrides it)."""
    if os.environ.get("GPUOPS_DEBIAN_MIRROR"):
        return os.environ["GPUOPS_DEBIAN_MIRROR"]
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")) + ["/etc/apt/sources.list"] + sorted(
            glob.glob("/etc/apt/sources.list.d/*.list")):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            continue
        if path.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if SUITE in fields.get("Suites", "").split() and "main" in fields.get("Components", "").split():
                    for uri in fields.get("URIs", "").split():
                        if uri.rstrip("/").endswith("/debian"):
                            return uri
        else:
            for line in text.splitlines():
                words = [word for word in line.split() if not word.startswith("[")]
                if len(words) >= 4 and words[0] == "deb" and words[2] == SUITE and words[1].rstrip("/").endswith("/debian"):
                    return words[1]
    return DEFAULT_MIRROR


def root_tarball(log: t.Callable[[str], None] = print) -> Path:
    """The cached tarball of the root, built once with debootstrap (tests/support/containers.py cached_tarball: under a
    lock, one build at a time)."""
    key = hashlib.sha256(json.dumps([SUITE, "minbase", PACKAGES]).encode()).hexdigest()[:12]

    def debootstrap(root: Path) -> None:
        mirror = apt_mirror()
        started = time.monotonic()
        argv = ["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, str(root), mirror]
        with open(CACHE / "debootstrap.log", "w", encoding="utf-8") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=900, check=False)
        if proc.returncode != 0:
            tail = (CACHE / "debootstrap.log").read_text(encoding="utf-8", errors="replace")[-3000:]
            raise ContainerError("%s exited %d (log: %s):\n%s" % (" ".join(argv), proc.returncode, CACHE / "debootstrap.log", tail))
        log("built %s from %s in %.0f s" % (root, mirror, time.monotonic() - started))

    return cached_tarball(CACHE / ("debian-%s-%s.tar" % (SUITE, key)), debootstrap)


def pristine_root(tarball: Path) -> Path:
    """The tarball unpacked once, next to it; booted read-only under a tmpfs overlay, so never changed."""
    root = tarball.with_suffix(".root")
    with open(CACHE / "build.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not root.is_dir():
            partial = tarball.with_suffix(".root.part")
            if partial.exists():
                shutil.rmtree(partial)
            partial.mkdir()
            subprocess.run(["tar", "--numeric-owner", "-C", str(partial), "-xpf", str(tarball)], check=True, timeout=300)
            partial.rename(root)
    return root


def venv_site_packages() -> Path:
    """The controller venv's packages: the managed host's (psutil, nvidia-ml-py) and the fake vLLM's (setproctitle)."""
    return Path(sysconfig.get_paths()["purelib"]).resolve()


def mounts_under(path: Path) -> t.List[str]:
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = line.split()[4].replace("\\040", " ")
            if point == str(path) or point.startswith(str(path) + "/"):
                found.append(point)
    return found


class Container:
    """One booted container. Every process in it dies with its PID 1; PID 1 is ended by recorded PID only."""

    def __init__(self, tarball: Path, name: t.Optional[str] = None) -> None:
        self.name = name or "gpuops-systemd-%d" % os.getpid()
        self.dir = CACHE / ("run-%s" % self.name)
        self.root = pristine_root(tarball)
        self.pth = self.dir / "gpuops-test-host.pth"
        self.log = self.dir / "console.log"
        self.tarball = tarball
        self.nspawn: t.Optional[subprocess.Popen] = None
        self.leader: t.Optional[int] = None
        self.leader_start: t.Optional[str] = None
        self.timings: t.Dict[str, float] = {}

    # ---- life cycle ------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        if self.dir.exists():
            self._remove_dir()
        self.dir.mkdir(parents=True)
        site = venv_site_packages()
        if not (self.root / "usr" / "bin" / site.parent.name).exists():
            raise ContainerError("the controller's packages are for %s, which the %s root lacks: run the tests with Python 3.11"
                                 % (site.parent.name, SUITE))
        # the container's python3 finds the managed host's packages and gpusim through this file, bound in read-only
        self.pth.write_text("%s\n%s\n" % (site, REPO / "simulator"), encoding="utf-8")

    def boot(self, timeout: float = 120) -> None:
        nspawn = shutil.which("systemd-nspawn")
        if nspawn is None:
            raise ContainerError("systemd-nspawn is missing: `make systemd-tests` installs Debian's systemd-container")
        argv = [nspawn, "--quiet", "--boot", "--directory=%s" % self.root, "--machine=%s" % self.name,
                # no machined, no host systemd: nspawn neither registers nor asks for a scope unit
                "--register=no", "--keep-unit", "--private-network", "--resolv-conf=off", "--timezone=off",
                "--link-journal=no", "--volatile=overlay", "--hostname=%s" % self.name,
                "--bind-ro=%s" % venv_site_packages(), "--bind-ro=%s" % (REPO / "simulator"),
                "--bind-ro=%s:%s" % (self.pth, INSIDE_PTH)]
        started = time.monotonic()
        with open(self.log, "wb") as console:
            self.nspawn = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                           start_new_session=True)
        deadline = time.monotonic() + timeout
        while self.leader is None:
            if self.nspawn.poll() is not None:
                raise ContainerError("%s exited %s before booting:\n%s" % (" ".join(argv), self.nspawn.returncode, self.console_tail()))
            self.leader = self._find_leader()
            if time.monotonic() > deadline:
                raise ContainerError("no PID 1 in the container after %d s:\n%s" % (timeout, self.console_tail()))
            time.sleep(0.1)
        self.leader_start = self._stat_start(self.leader)
        state, proc = "offline", None
        while state not in ("running", "degraded") and time.monotonic() < deadline:
            # "offline" until systemd has made /run/systemd/system; then --wait waits for the boot's end
            if proc is not None:
                time.sleep(0.2)
            proc = self.run(["systemctl", "is-system-running", "--wait"], timeout=max(1.0, deadline - time.monotonic()), check=False)
            state = proc.stdout.strip()
        if state not in ("running", "degraded") or proc is None:
            raise ContainerError("the container's systemd did not finish booting (%r, rc %d):\n%s\n%s" % (
                state, proc.returncode if proc else -1, proc.stderr if proc else "", self.console_tail()))
        self.timings["boot_s"] = time.monotonic() - started

    def _find_leader(self) -> t.Optional[int]:
        assert self.nspawn is not None
        try:
            children = Path("/proc/%d/task/%d/children" % (self.nspawn.pid, self.nspawn.pid)).read_text(encoding="utf-8").split()
        except OSError:
            return None
        for child in children:
            try:
                status = Path("/proc/%s/status" % child).read_text(encoding="utf-8")
            except OSError:
                continue
            nspid = re.search(r"^NSpid:\s+(.*)$", status, re.M)
            if nspid and nspid.group(1).split()[-1] == "1" and len(nspid.group(1).split()) > 1:
                return int(child)
        return None

    @staticmethod
    def _stat_start(pid: int) -> t.Optional[str]:
        try:
            stat = Path("/proc/%d/stat" % pid).read_text(encoding="utf-8")
        except OSError:
            return None
        return stat[stat.rindex(")") + 2:].split()[19]

    def leader_alive(self) -> bool:
        return self.leader is not None and self._stat_start(self.leader) == self.leader_start

    def stop(self) -> None:
        """Power the container off (SIGTERM to nspawn, which asks systemd to halt); SIGKILL its PID 1 if it lingers.
        Then remove the run's root; nothing of it stays mounted (nspawn's mounts lived in the container's namespace)."""
        try:
            if self.nspawn is not None and self.nspawn.poll() is None:
                self.nspawn.send_signal(signal.SIGTERM)
                try:
                    self.nspawn.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    if self.leader_alive():
                        os.kill(t.cast(int, self.leader), signal.SIGKILL)  # the kernel ends every process in its PID namespace
                    self.nspawn.wait(timeout=30)
            elif self.leader_alive():
                os.kill(t.cast(int, self.leader), signal.SIGKILL)
        finally:
            # nspawn's own leftovers for this machine name on a host whose /run is not a tmpfs
            for leftover in (Path("/run/systemd/nspawn/propagate") / self.name,):
                if leftover.is_dir() and not os.listdir(leftover):
                    leftover.rmdir()
            if not self.leader_alive():
                self._remove_dir()

    def _remove_dir(self) -> None:
        busy = mounts_under(self.dir)
        if busy:
            raise ContainerError("not removing %s: still mounted there: %s" % (self.dir, busy))
        shutil.rmtree(self.dir)

    def console_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return "(no console log)"

    # ---- inside ----------------------------------------------------------------------------------------------

    def enter(self) -> t.List[str]:
        if not self.leader_alive():
            raise ContainerError("the container's PID 1 (%s) no longer runs:\n%s" % (self.leader, self.console_tail()))
        return ["nsenter", "--target", str(self.leader), "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--"]

    def run(self, argv: t.Sequence[str], stdin: t.Optional[str] = None, timeout: float = 60,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run argv inside the container (its root, namespaces and a plain environment); returns the completed process."""
        proc = subprocess.run(self.enter() + list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"})
        if check and proc.returncode != 0:
            raise ContainerError("in the container, %s exited %d:\n%s\n%s" % (list(argv), proc.returncode, proc.stdout, proc.stderr))
        return proc

    def snapshot(self, unit: str, port: int, state: str, pids: t.Sequence[int] = (),
                 files: t.Sequence[str] = (), facts: t.Sequence[int] = ()) -> t.Dict[str, t.Any]:
        """The test's own readings inside the container (see inside.py)."""
        args = json.dumps({"unit": unit, "port": port, "state": state, "pids": list(pids), "files": list(files),
                           "facts": list(facts)})
        proc = self.run([INSIDE_PYTHON, "-", args], stdin=INSIDE.read_text(encoding="utf-8"))
        return json.loads(proc.stdout)
