# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated host for the benchmark module's tests: one GPU per fake vLLM server, each started with its own knobs,
all stopped by their own handles and the host cleaned up by recorded PID when the block ends."""

from __future__ import annotations

import contextlib
import typing as t
from pathlib import Path

from inventories import write_inventory
from simhost import SimHost

Server = t.TypeVar("Server")

__all__ = ["bench_host"]


@contextlib.contextmanager
def bench_host(tmp: Path, make: t.Callable[[SimHost, int, t.Dict[str, str], Path], Server],
               servers: t.Sequence[t.Tuple[str, t.Dict[str, str]]]) -> t.Iterator[t.Tuple[SimHost, t.List[Server], Path]]:
    """(host, servers, inventory): `servers` are (name, knobs), server i on GPU i with its log at tmp/<name>.log, made
    (and started) by make(host, gpu, knobs, log), each ready before the block runs; the inventory names the host."""
    host = SimHost("bench-client", tmp / "host")
    host.gpusim("create", "--gpus", str(len(servers)))
    started: t.List[t.Any] = []
    try:
        for gpu, (name, knobs) in enumerate(servers):
            started.append(make(host, gpu, knobs, tmp / ("%s.log" % name)))
        for server in started:
            server.wait_ready()
        yield host, started, write_inventory(tmp / "inventory.json", [host])
    finally:
        for server in started:
            server.stop()
        result = host.gpusim("cleanup", check=False)
        assert result.returncode == 0, result.stderr
