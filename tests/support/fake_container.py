# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A process that the host sees in a container, without a container runtime: what gpu_facts reads of a container is a
process's /proc/PID/cgroup and the runtime's `inspect` command, and both are made here.

- `in_cgroup(pids, name)` moves running processes into a new cgroup ``name`` (for podman's containers
  `podman_cgroup(ID)`: ``libpod-<64 hex>``; a path of several parts, such as a Kubernetes pod's container's, makes the
  parents it lacks), so the kernel shows that path in their /proc/PID/cgroup; on leaving, it moves every process still
  in it back where it was and removes the cgroup (and the parents it made), also when the test fails. The cgroup is
  made in cgroup v1's pids hierarchy (a legacy or hybrid machine) or else in the unified hierarchy (cgroup v2 only);
  it needs root.
- `write_fake_podman(directory, ID, name, image)` writes a `podman` command that answers
  ``podman inspect --type container --format json ID`` for that one container with the fields podman prints (Id, Name,
  ImageName, Config.Image), and fails as podman does for any other command. Put ``directory`` first on the PATH of
  the process that asks.
"""

from __future__ import annotations

import contextlib
import json
import time
import typing as t
from pathlib import Path

__all__ = ["CGROUP_ROOT", "cgroup_hierarchy", "in_cgroup", "podman_cgroup", "write_fake_podman"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_hierarchy(root: Path = CGROUP_ROOT) -> t.Tuple[Path, str]:
    """(mount point, the controller field of /proc/PID/cgroup lines) of the hierarchy a test cgroup is made in."""
    if (root / "pids" / "cgroup.procs").exists():
        return root / "pids", "pids"
    if (root / "cgroup.controllers").exists():
        return root, ""
    raise AssertionError("no cgroup hierarchy to place a process in: neither cgroup v1's %s nor cgroup v2 at %s" % (root / "pids", root))


def podman_cgroup(container_id: str) -> str:
    """The cgroup name podman gives a container's processes (the path's last part: ``libpod-ID``)."""
    return "libpod-%s" % container_id


def _cgroup_of(pid: int, controller: str) -> str:
    """The process's cgroup path in the hierarchy of ``controller`` ("" for cgroup v2's), as /proc/PID/cgroup shows it."""
    for line in Path("/proc/%d/cgroup" % pid).read_text(encoding="utf-8").splitlines():
        _hid, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise AssertionError("PID %d has no cgroup of hierarchy %r" % (pid, controller))


def _members(cgroup: Path) -> t.List[int]:
    try:
        return [int(word) for word in (cgroup / "cgroup.procs").read_text(encoding="ascii").split()]
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def in_cgroup(pids: t.Sequence[int], name: str, root: Path = CGROUP_ROOT, timeout: float = 10.0) -> t.Iterator[Path]:
    """Runs the block with ``pids`` in the new cgroup ``name`` (see the module doc); yields its directory."""
    mount, controller = cgroup_hierarchy(root)
    cgroup = mount / name
    parents = [mount.joinpath(*Path(name).parts[:depth]) for depth in range(1, len(Path(name).parts))]
    made = [parent for parent in parents if not parent.exists()]
    for parent in made:
        parent.mkdir()
    cgroup.mkdir()
    origin: t.Dict[int, str] = {}
    try:
        for pid in pids:
            origin[pid] = _cgroup_of(pid, controller)
            (cgroup / "cgroup.procs").write_text("%d\n" % pid, encoding="ascii")
            assert _cgroup_of(pid, controller) == "/" + name, (pid, _cgroup_of(pid, controller))
        yield cgroup
    finally:
        deadline = time.monotonic() + timeout
        fallback = next(iter(origin.values()), "/")
        while True:
            for pid in _members(cgroup):  # back where it was (a child it forked meanwhile: where the first one was)
                for home in (mount / origin.get(pid, fallback).lstrip("/"), mount):
                    try:
                        (home / "cgroup.procs").write_text("%d\n" % pid, encoding="ascii")
                        break
                    except ProcessLookupError:
                        break  # it exited meanwhile
                    except OSError:
                        continue  # its cgroup went away: the hierarchy's root
            try:
                cgroup.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:  # EBUSY: a process that is exiting may be listed for a moment more
                if time.monotonic() > deadline:
                    raise AssertionError("cannot remove the test cgroup %s (still in it: %s): %s" % (cgroup, _members(cgroup), exc)) from exc
                time.sleep(0.1)
        for parent in reversed(made):
            parent.rmdir()


def write_fake_podman(directory: Path, container_id: str, name: str, image: str) -> Path:
    """``directory``/podman (see the module doc); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    answer = json.dumps([{"Id": container_id, "Name": name, "ImageName": image, "Config": {"Image": image}}], indent=1)
    podman = directory / "podman"
    podman.write_text(
        "#!/bin/sh\n"
        "# podman inspect for one container, as podman 4 prints it (the fields gpu_facts reads)\n"
        'if [ "$*" = "inspect --type container --format json %s" ]; then\n'
        "cat <<'ANSWER'\n%s\nANSWER\n"
        "exit 0\n"
        "fi\n"
        'echo "Error: no such container: $*" >&2\n'
        "exit 125\n" % (container_id, answer), encoding="utf-8")
    podman.chmod(0o755)
    return podman
