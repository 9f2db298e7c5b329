# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one simulated GPU host of the suites: gpusim's own API (gpusim.api.Host), its command line (`gpusim`), the
host's name in an inventory and its server's loopback port.

Every host is a gpusim state directory; its processes are recorded by gpusim and cleaned up by recorded PID only.
"""

from __future__ import annotations

import typing as t
from pathlib import Path

from gpusim.api import SIM_LIB_DIR, Host, free_port

SIM_LIB = SIM_LIB_DIR

__all__ = ["SIM_LIB", "SimHost", "hosts_with_ports", "free_port"]


class SimHost(Host):
    """One simulated GPU host: gpusim's own API (gpusim.api.Host: spawn_vllm, status, used_mib, cleanup, ...),
    its command line (`gpusim`), and the host's name in an inventory."""

    def __init__(self, name: str, state: Path) -> None:
        super().__init__(state)
        self.name = name
        self.port = 0  # its server's loopback port, when the test gives it one (hosts_with_ports, the fleet fixture)


def hosts_with_ports(make_host: t.Callable[..., SimHost], *names: str) -> t.List[SimHost]:
    """Simulated hosts, each with a free loopback port for its server (host.port)."""
    made = []
    for name in names:
        host = make_host(name)
        host.port = free_port()
        made.append(host)
    return made
