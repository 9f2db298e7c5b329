# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures: a contained systemd (systemd-nspawn over a debootstrapped Debian root under build/), always ended."""

from __future__ import annotations

import os
import shutil
import typing as t

import pytest

from nspawn import REPO, Container, root_tarball

CAP_SYS_ADMIN = 21


def _cannot_contain() -> t.Optional[str]:
    """Why this machine cannot boot a container at all (then the tests skip); None when it can."""
    if os.geteuid() != 0:
        return "booting a systemd-nspawn container needs root (this runs as uid %d)" % os.geteuid()
    with open("/proc/self/status", encoding="utf-8") as status:
        caps = next((int(line.split()[1], 16) for line in status if line.startswith("CapEff:")), 0)
    if not caps & (1 << CAP_SYS_ADMIN):
        return "no CAP_SYS_ADMIN here (an unprivileged container?): cannot create the namespaces systemd-nspawn needs"
    return None


@pytest.fixture(scope="session")
def container() -> t.Iterator[Container]:
    """A booted Debian bookworm with its own systemd as PID 1; ended by its recorded PID, its root removed."""
    reason = _cannot_contain()
    if reason:
        pytest.skip(reason)
    missing = [cmd for cmd in ("debootstrap", "systemd-nspawn", "nsenter", "tar") if shutil.which(cmd) is None]
    if missing:
        pytest.fail("missing %s: `make systemd-tests` installs Debian's debootstrap, systemd-container and util-linux" % missing)
    if not (REPO / "simulator" / "build" / "lib" / "libnvidia-ml.so.1").exists():
        pytest.fail("the fake NVML is not built: run `make sim` (`make systemd-tests` does)")
    box = Container(root_tarball())
    try:
        box.prepare()
        box.boot()
        yield box
    finally:
        box.stop()
