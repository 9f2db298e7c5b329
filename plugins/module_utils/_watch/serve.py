# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_watch): the metrics endpoint of a GPU host (docs/watch.md). It may import the flat files of
# module_utils, _http, _host, _gpu, _reclaim, _server and _report (whose reading and classification it shows); never a
# module or a plugin, and no other package imports it.

"""The metrics endpoint: a small HTTP server (the standard library's) that answers GET /metrics with one fresh reading.

Run by the unit playbooks/watch_setup.yml installs, with the Python of the environment prepare_hosts builds on each
host (nvidia-ml-py and psutil; nothing else is needed), from a copy of this collection's module_utils:

    PYTHONPATH=DIR python -m ansible_collections.gpuops.fleet.plugins.module_utils._watch.serve --port 9835 ...

This is the one file of the collection that serves HTTP (tests/unit/.../test_import_rules.py).

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import argparse
import http.server
import ipaddress
import shutil
import socket
import sys
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._report.reading import DEFAULT_STATE_DIR
from ansible_collections.gpuops.fleet.plugins.module_utils._watch.reading import Settings, Watch

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_PORT = 9835
DEFAULT_LISTEN = "0.0.0.0"
DEFAULT_INTERVAL_S = 60.0
INTERVAL_MIN_S, INTERVAL_MAX_S = 5.0, 3600.0
GENERATE_TIMEOUT_MAX_S = 120.0


class SettingsError(ValueError):
    """A setting that cannot be used, with its name and value."""


def listen_address(value: str) -> str:
    """An IPv4 or IPv6 address to listen on (0.0.0.0 and :: mean every address). Raises SettingsError."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise SettingsError("listen: %r is not an IP address (0.0.0.0 for every address, 127.0.0.1 for this host only)" % (value,)) from None


def check(args: argparse.Namespace) -> None:
    """Raises SettingsError naming the first setting that cannot be used and its value."""
    listen_address(args.listen)
    if not 1 <= args.port <= 65535:
        raise SettingsError("port: %r must be from 1 to 65535" % (args.port,))
    if not INTERVAL_MIN_S <= args.interval <= INTERVAL_MAX_S:
        raise SettingsError("interval: %r must be from %g to %g seconds" % (args.interval, INTERVAL_MIN_S, INTERVAL_MAX_S))
    if not 0 < args.generate_timeout <= GENERATE_TIMEOUT_MAX_S:
        raise SettingsError("generate_timeout: %r must be more than 0 and at most %g seconds" % (args.generate_timeout, GENERATE_TIMEOUT_MAX_S))
    if not 0 < args.health_timeout <= 60:
        raise SettingsError("health_timeout: %r must be more than 0 and at most 60 seconds" % (args.health_timeout,))
    if not args.state_dir.startswith("/"):
        raise SettingsError("state_dir: %r is not an absolute path" % (args.state_dir,))
    if not args.host or any(char.isspace() for char in args.host):
        raise SettingsError("host: %r must be a name without spaces" % (args.host,))


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(prog="gpuops-watch", description="GPU and vLLM server metrics of this host (Prometheus text)")
    found.add_argument("--listen", default=DEFAULT_LISTEN, help="address to listen on (default %(default)s)")
    found.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s)")
    found.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S,
                       help="seconds between two generation checks of a server (default %(default)s)")
    found.add_argument("--host", default=socket.gethostname(), help="the host label of every series (default: the host name)")
    found.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="the role's records (default %(default)s)")
    found.add_argument("--health-host", default="127.0.0.1", help="where the servers are asked (default %(default)s)")
    found.add_argument("--health-timeout", type=float, default=3.0)
    found.add_argument("--generate-timeout", type=float, default=10.0)
    return found


def handler(watch: Watch) -> t.Type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "gpuops-watch"

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    body, status = watch.text(), 200
                except Exception as exc:  # pylint: disable=broad-except  # the endpoint stays up and says why
                    body, status = "reading failed: %s: %s\n" % (type(exc).__name__, exc), 500
            elif path == "/":
                body, status = "gpuops.fleet metrics endpoint: /metrics\n", 200
            else:
                body, status = "not found\n", 404
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: t.Any) -> None:  # pylint: disable=redefined-builtin
            return  # the journal does not need a line per scrape

    return Handler


def make_server(address: str, port: int, watch: Watch) -> http.server.ThreadingHTTPServer:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    class Server(http.server.ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

    return Server((address, port), handler(watch))


def main(argv: t.Optional[t.Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        check(args)
    except SettingsError as exc:
        sys.stderr.write("gpuops-watch: %s\n" % exc)
        return 2
    # pylint: disable=import-outside-toplevel
    try:
        import psutil
    except ImportError:
        sys.stderr.write("gpuops-watch: psutil is not installed in %s (run playbooks/prepare_hosts.yml)\n" % sys.executable)
        return 2
    try:
        import pynvml
    except ImportError:
        pynvml = None  # the reading falls back to nvidia-smi, as gpu_facts does
    settings = Settings(host=args.host, interval=args.interval, state_dir=args.state_dir, health_host=args.health_host,
                        health_timeout=args.health_timeout, generate_timeout=args.generate_timeout)
    watch = Watch(settings, pynvml, psutil, find_smi=lambda: shutil.which("nvidia-smi"))
    try:
        server = make_server(listen_address(args.listen), args.port, watch)
    except OSError as exc:
        sys.stderr.write("gpuops-watch: cannot listen on %s port %d: %s\n" % (args.listen, args.port, exc))
        return 1
    sys.stdout.write("gpuops-watch: serving http://%s:%d/metrics for host %s\n" % (args.listen, args.port, args.host))
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
