# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real containers for the tests: podman (and docker, with a daemon the test starts) running a small local image.

No registry is needed: the image is this machine's python3.11 (the interpreter, the shared libraries `ldd` names and
its standard library, without its tests, IDLE, tkinter, ensurepip, lib2to3 and bytecode caches) in a root directory,
tarred once under build/container-image/ (rebuilt only when missing) and imported as IMAGE. Every container is run
with RUN_ARGS: no network, runc as the OCI runtime (crun fails on a cgroups hybrid host) and limits no higher than
this machine grants (raising them fails without the rights).

A Containers object (a context manager: the `podman_containers` fixture of tests/integration/conftest.py) runs containers
and removes every one it ran by its id, stopped or not, when the test ends; imported_image() imports the image under a
tag of its own (unique_tag) and removes that tag at the end (never by the image's id: the same root imported under
another tag has the same id). Containers are removed by their ids, never by name or by filter. A
DockerDaemon is a dockerd of the test's own, ended by its recorded PID.

Found through pytest's `pythonpath` setting (each suite's pytest.ini names tests/support).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "build" / "container-image"
IMAGE = "localhost/gpuops-sim:test"
# Debian's interpreter (the one package python3.11 installs), whatever Python runs the tests
SYSTEM_PYTHON = "/usr/bin/python3.11"
# the packages `make integration` installs for these tests (Debian's names)
PODMAN_PACKAGES = ("podman", "runc", "catatonit")
RUN_ARGS = ("--runtime", "runc", "--network", "none", "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=4096:4096")
DOCKER_RUN_ARGS = ("--network", "none")
# the standard library's parts a container never needs
_STDLIB_SKIPPED = ("test", "idlelib", "tkinter", "ensurepip", "lib2to3", "__pycache__")
CLI_TIMEOUT_S = 120


class ContainerError(AssertionError):
    """A container command failed; the message has the command, its exit status and its output."""


def podman_missing() -> t.Optional[str]:
    """Why the podman tests cannot run here (None when they can): podman or runc missing, or not root."""
    missing = [name for name in ("podman", "runc") if shutil.which(name) is None and not os.path.exists("/usr/sbin/" + name)]
    if missing:
        return "%s not installed (Debian packages %s; `make integration` installs them)" % (" and ".join(missing), " ".join(PODMAN_PACKAGES))
    if os.geteuid() != 0:
        return "podman's containers here are root's: run the tests as root"
    if not os.path.exists(SYSTEM_PYTHON):
        return "%s (Debian's python3.11, the test image's interpreter) is not installed" % SYSTEM_PYTHON
    return None


def _cli(argv: t.Sequence[str], timeout: float = CLI_TIMEOUT_S, check: bool = True) -> "subprocess.CompletedProcess[str]":
    proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise ContainerError("%s exited %d: %s %s" % (" ".join(argv), proc.returncode, proc.stdout.strip(), proc.stderr.strip()))
    return proc


def _libraries(binary: str) -> t.List[str]:
    """The shared libraries `ldd` says ``binary`` loads (the loader included), by absolute path."""
    out = _cli(["ldd", binary]).stdout
    return sorted({word for line in out.splitlines() for word in line.split() if word.startswith("/")})


def cached_tarball(tarball: Path, fill: t.Callable[[Path], None], timeout: float = 300) -> Path:
    """``tarball``, made once: ``fill(root)`` fills a new empty folder beside it, which is tarred (numeric owners) and then
    removed, whatever happened. Under a lock beside it (build.lock): one build at a time, and a build in progress is
    waited for. Also the cache of tests/systemd's Debian root."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with open(tarball.parent / "build.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.exists():
            return tarball
        root = tarball.parent / ("%s-%d" % (tarball.stem, os.getpid()))
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        try:
            fill(root)
            partial = tarball.with_suffix(".tar.part")
            _cli(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], timeout=timeout)
            partial.rename(tarball)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return tarball


def _python_root(root: Path) -> None:
    """The test image's root: SYSTEM_PYTHON as python3, the libraries it loads, its standard library (see the module doc)."""
    (root / "usr" / "bin").mkdir(parents=True)
    shutil.copy2(SYSTEM_PYTHON, root / "usr" / "bin" / "python3.11")
    os.symlink("python3.11", root / "usr" / "bin" / "python3")
    for library in _libraries(SYSTEM_PYTHON):
        target = root / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)  # follows the link: the file itself, under the name the loader asks for
    stdlib = _cli([SYSTEM_PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"]).stdout.strip()
    shutil.copytree(stdlib, root / stdlib.lstrip("/"), symlinks=True, ignore=shutil.ignore_patterns(*_STDLIB_SKIPPED))
    for name in ("tmp", "proc", "sys", "dev", "etc", "run"):
        (root / name).mkdir(exist_ok=True)


def image_tarball() -> Path:
    """The test image's root as a tarball under build/container-image/, made once."""
    return cached_tarball(CACHE / "python3.11-rootfs.tar", _python_root)


class Runtime:
    """One runtime's command line: ``podman`` (this machine's root podman) or ``docker -H unix://SOCKET``."""

    def __init__(self, argv: t.Sequence[str], run_args: t.Sequence[str]) -> None:
        self.argv = list(argv)
        self.name = os.path.basename(self.argv[0])
        self.run_args = list(run_args)

    def __call__(self, *args: str, check: bool = True, timeout: float = CLI_TIMEOUT_S) -> "subprocess.CompletedProcess[str]":
        return _cli(self.argv + list(args), timeout=timeout, check=check)

    def image_id(self, image: str) -> t.Optional[str]:
        """The id of ``image`` (a name or an id) when this runtime has it, else None."""
        proc = self("image", "inspect", "--format", "{{.Id}}", image, check=False)
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def import_image(self, image: str) -> str:
        """Import the cached root as ``image`` (the tarball made first if missing); its id."""
        self("import", str(image_tarball()), image)
        found = self.image_id(image)
        if found is None:
            raise ContainerError("%s import %s: the image is not there afterwards" % (self.name, image))
        return found

    def inspect(self, container: str) -> t.Dict[str, t.Any]:
        """The container's ``inspect`` object (state, restart policy and count, ...)."""
        found = json.loads(self("inspect", "--type", "container", container).stdout)
        if not isinstance(found, list) or len(found) != 1:
            raise ContainerError("%s inspect %s: %r" % (self.name, container, found))
        return t.cast(t.Dict[str, t.Any], found[0])


def host_pid(state: t.Mapping[str, t.Any]) -> int:
    """The container's main process as the host numbers it (inspect's State.Pid)."""
    return int(state["State"]["Pid"])


def restart_count(state: t.Mapping[str, t.Any]) -> int:
    return int(state.get("RestartCount") or 0)


class Containers:
    """The containers one test runs with ``runtime`` from ``image``, each removed by its id when the test ends (a context
    manager: ``with Containers(runtime, image) as made``), whatever happened meanwhile."""

    def __init__(self, runtime: Runtime, image: str = IMAGE) -> None:
        self.runtime = runtime
        self.image = image
        self.ids: t.List[str] = []

    def __enter__(self) -> "Containers":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def run(self, command: t.Sequence[str], *options: str) -> str:
        """Start a detached container running ``command`` (RUN_ARGS and ``options`` before the image); its id."""
        proc = self.runtime("run", "-d", *self.runtime.run_args, *options, self.image, *command, check=False)
        found = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
        if found:
            self.ids.append(found[0])
        if proc.returncode != 0 or not found:
            raise ContainerError("%s run exited %d: %s %s" % (self.runtime.name, proc.returncode, proc.stdout.strip(), proc.stderr.strip()))
        return found[0]

    def inspect(self, container: str) -> t.Dict[str, t.Any]:
        return self.runtime.inspect(container)

    def wait_running(self, container: str, timeout: float = 30.0) -> t.Dict[str, t.Any]:
        """The container's inspect object once it runs with a main process; raises after ``timeout``."""
        end = time.monotonic() + timeout
        while True:
            state = self.inspect(container)
            if state["State"].get("Running") and host_pid(state) > 0:
                return state
            if time.monotonic() > end:
                raise ContainerError("%s container %s is not running after %g s: %s" % (self.runtime.name, container, timeout, state["State"]))
            time.sleep(0.05)

    def running(self) -> t.List[str]:
        """The containers of this test that still run."""
        found = []
        for container in self.ids:
            proc = self.runtime("inspect", "--type", "container", "--format", "{{.State.Running}}", container, check=False)
            if proc.returncode == 0 and proc.stdout.strip() == "true":
                found.append(container)
        return found

    def remaining(self) -> t.List[str]:
        """The containers of this test that the runtime still knows."""
        return [container for container in self.ids
                if self.runtime("inspect", "--type", "container", "--format", "{{.Id}}", container, check=False).returncode == 0]

    def cleanup(self) -> None:
        """Remove every container of this test by id (stopped at once first); raises when one is left."""
        for container in self.ids:
            self.runtime("rm", "-f", *(["-t", "0"] if self.runtime.name == "podman" else []), container, check=False)
        left = self.remaining()
        if left:
            raise ContainerError("%s could not remove container(s) %s" % (self.runtime.name, ", ".join(left)))


@contextlib.contextmanager
def imported_image(runtime: Runtime, image: str) -> t.Iterator[str]:
    """The cached root imported as ``image`` (a tag of its own per user), its tag removed at the end.

    Never by its id, never forced: the same root imported under another tag (a pytest-xdist worker running tests of
    the same module) has the same id, and `rmi -f ID` would remove that tag and every container of it, running or
    not. The runtime removes the image itself with its last tag."""
    runtime.import_image(image)
    try:
        yield image
    finally:
        runtime("rmi", image, check=False)
        if runtime.image_id(image) is not None:
            raise ContainerError("%s could not remove the tag %s (a container of this test still uses it?)" % (runtime.name, image))


def unique_tag(base: str = IMAGE) -> str:
    """``base`` with this process's PID and the time in its tag: one image per test module, whatever runs beside it."""
    return "%s-%d-%d" % (base, os.getpid(), int(time.time() * 1000))


def descendants(pid: int) -> t.List[int]:
    """Every descendant of host process ``pid`` (its children first), from /proc's children lists."""
    found: t.List[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        for task in sorted(Path("/proc/%d/task" % parent).glob("*")) if Path("/proc/%d/task" % parent).is_dir() else []:
            try:
                children = [int(word) for word in (task / "children").read_text().split()]
            except OSError:
                continue
            for child in children:
                if child not in found:
                    found.append(child)
                    queue.append(child)
    return found


def comm(pid: int) -> t.Optional[str]:
    try:
        return Path("/proc/%d/comm" % pid).read_text().strip()
    except OSError:
        return None


def docker_missing() -> t.Optional[str]:
    """Why a docker daemon of a test's own cannot be started here (None when it can)."""
    for name, package in (("dockerd", "docker.io"), ("docker", "docker.io"), ("containerd", "containerd")):
        if shutil.which(name) is None and not os.path.exists("/usr/sbin/" + name):
            return "%s not installed (Debian package %s)" % (name, package)
    if os.geteuid() != 0:
        return "dockerd needs root"
    return None


@contextlib.contextmanager
def docker_daemon(root: Path, timeout: float = 30.0) -> t.Iterator[Runtime]:
    """A dockerd of the test's own (its data, exec root, socket and pidfile under ``root``, a short path: a socket's
    path has at most 107 bytes; no iptables, no bridge, so its containers run with --network none), and the docker command
    line that talks to it. At the end the daemon is ended by its recorded PID (start time checked: SIGTERM, SIGKILL after
    ``timeout``), its containerd shims (the processes whose command line names ``root``) must be gone within
    ``timeout``, and ``root`` is removed once nothing is mounted below it."""
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "docker.sock"
    log_path = root / "dockerd.log"
    argv = [shutil.which("dockerd") or "/usr/sbin/dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
            "-H", "unix://%s" % socket, "--pidfile", str(root / "dockerd.pid"), "--iptables=false", "--ip6tables=false",
            "--bridge=none", "--ip-masq=false"]
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                start_new_session=True)
    start = _start_time(proc.pid)
    try:
        runtime = Runtime(["docker", "-H", "unix://%s" % socket], DOCKER_RUN_ARGS)
        end = time.monotonic() + timeout
        while runtime("version", "--format", "{{.Server.Version}}", check=False, timeout=10).returncode != 0:
            if proc.poll() is not None or time.monotonic() > end:
                raise ContainerError("dockerd did not answer within %g s: %s" % (timeout, log_path.read_text(errors="replace")[-2000:]))
            time.sleep(0.1)
        yield runtime
    finally:
        if proc.poll() is None and _start_time(proc.pid) == start:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        end = time.monotonic() + timeout
        while _naming(str(root)) and time.monotonic() < end:
            time.sleep(0.1)
        left = _naming(str(root))
        if left:
            raise ContainerError("processes of the test's dockerd are left after it ended: %s" % left)
        # dockerd binds the host's network namespace there for its first --network host container, and leaves it
        host_netns = root / "exec" / "netns" / "default"
        if str(host_netns) in _mounts_under(root):
            subprocess.run(["umount", str(host_netns)], check=False, timeout=30)
        mounted = _mounts_under(root)
        if mounted:
            raise ContainerError("mounts of the test's dockerd are left after it ended: %s" % mounted)
        shutil.rmtree(root)


def _mounts_under(root: Path) -> t.List[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        return [line.split()[4] for line in info if line.split()[4].startswith(str(root) + "/")]


def _naming(text: str) -> t.List[int]:
    """The processes whose command line has ``text`` (not this one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _stat_fields(pid: int) -> t.Optional[t.List[str]]:
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _start_time(pid: int) -> t.Optional[str]:
    fields = _stat_fields(pid)
    return None if fields is None else fields[19]
