# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Whether processes hold a TCP connection to an address: how a headless rank of a server across hosts shows that it
is still joined to its head (a rank whose head is gone keeps retrying, connected to nothing there).

Package rule (_host): what a host's kernel says about its processes; it imports no other package of this collection.
Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import ipaddress
import socket
import typing as t

MAPPED = "::ffff:"


def addresses_of(name: str) -> t.Set[str]:
    """The IP addresses of ``name``: itself when it is one, else what the resolver says (empty when it cannot)."""
    try:
        return {str(ipaddress.ip_address(name))}
    except ValueError:
        pass
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return set()


def connected_to(psutil: t.Any, pids: t.Iterable[int], name: str) -> t.Optional[bool]:
    """Whether any of ``pids`` holds an established TCP connection to ``name``; None when that cannot be told (the
    address does not resolve, or no connection table of theirs could be read)."""
    wanted = addresses_of(name)
    if not wanted:
        return None
    read = False
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            table = getattr(proc, "net_connections", None) or getattr(proc, "connections", None)  # psutil < 6: connections
            if table is None:
                continue
            conns = table(kind="tcp")
        except psutil.Error:
            continue
        read = True
        for conn in conns:
            remote = getattr(conn, "raddr", None)
            if not remote or conn.status != psutil.CONN_ESTABLISHED:
                continue
            address = str(remote[0])
            if address in wanted or (address.startswith(MAPPED) and address[len(MAPPED):] in wanted):
                return True
    return False if read else None
