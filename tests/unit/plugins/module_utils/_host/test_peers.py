# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether this process holds a TCP connection to an address: real sockets on loopback, read by the real psutil."""

from __future__ import annotations

import os
import socket

import psutil

from ansible_collections.gpuops.fleet.plugins.module_utils._host.peers import addresses_of, connected_to


def test_a_connection_to_the_address_is_seen_and_its_end_too():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname(), timeout=5)
    accepted, _peer = server.accept()
    try:
        assert connected_to(psutil, [os.getpid()], "127.0.0.1") is True
        assert connected_to(psutil, [os.getpid()], "10.255.255.1") is False
    finally:
        client.close()
        accepted.close()
        server.close()
    assert connected_to(psutil, [os.getpid()], "127.0.0.1") is False


def test_what_cannot_be_told_is_none():
    assert connected_to(psutil, [], "127.0.0.1") is None  # no table read
    assert connected_to(psutil, [2 ** 22 + 1], "127.0.0.1") is None  # no such process
    assert connected_to(psutil, [os.getpid()], "no-such-host.invalid") is None  # does not resolve
    assert addresses_of("::ffff:10.0.0.1") == {"::ffff:a00:1"} and addresses_of("10.0.0.1") == {"10.0.0.1"}
