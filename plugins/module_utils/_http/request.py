# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one plain HTTP request of this collection: a GET (or a small JSON POST) straight to a server, one answer back.

The standard library only: these run on the GPU host, where the collection asks for nothing but nvidia-ml-py and
psutil. One request over http.client, straight to the server: it goes through no proxy (a check of a server's own
port must not leave the host), follows no redirect, and checks the certificate of an https URL against the system's
CAs unless told not to. An HTTP error status is an answer too; a connection failure is an answer without a status.
Not ansible.module_utils.urls: a module run compiles every module_utils file it imports from the AnsiballZ zip, and
urls with the TLS helpers it pulls in cost about 90 ms of host CPU per module run, several module runs per restart.
The benchmark's streaming client (_bench/client.py) is apart: it times each chunk of an answer.

Package rule (_http): plain HTTP requests and the Prometheus text of an answer. It imports only the flat files of
module_utils and its own files: never another package, and never a module; every package may import it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import http.client
import json
import socket
import typing as t
import urllib.parse


class Reply(t.NamedTuple):
    status: t.Optional[int]  # None when no HTTP answer came (refused, reset, timed out, TLS refused)
    body: str
    error: t.Optional[str]  # why there is no answer, in a few words

    def describe(self) -> str:
        return "HTTP %d" % self.status if self.status is not None else (self.error or "no answer")


def http_get(url: str, timeout: float, headers: t.Optional[t.Mapping[str, str]] = None, validate_certs: bool = True) -> Reply:
    """GET ``url``; an HTTP error status is a Reply too, a connection failure a Reply without status."""
    return http_request("GET", url, timeout, headers, validate_certs=validate_certs)


def http_post_json(url: str, payload: t.Any, timeout: float, headers: t.Optional[t.Mapping[str, str]] = None) -> Reply:
    """POST ``payload`` as JSON to ``url``, as http_get reads the answer."""
    sent = dict(headers or {})
    sent["Content-Type"] = "application/json"
    return http_request("POST", url, timeout, sent, json.dumps(payload).encode("utf-8"))


def http_request(method: str, url: str, timeout: float, headers: t.Optional[t.Mapping[str, str]] = None,
                 body: t.Optional[bytes] = None, validate_certs: bool = True) -> Reply:
    """One request to ``url``, straight to the server; ``timeout`` bounds each socket operation."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Reply(None, "", "not an http or https URL: %s" % url)
    target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    connection: http.client.HTTPConnection
    try:
        if parts.scheme == "https":
            import ssl  # pylint: disable=import-outside-toplevel  # only for https
            context = ssl.create_default_context()
            if not validate_certs:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, context=context)
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    except ValueError as exc:  # a port that is not a number
        return Reply(None, "", "bad URL %s: %s" % (url, exc))
    try:
        connection.request(method, target, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        return Reply(response.status, response.read().decode("utf-8", errors="replace"), None)
    except (socket.timeout, TimeoutError):
        return Reply(None, "", "timed out after %g s" % timeout)
    except (http.client.HTTPException, OSError) as exc:  # ssl.SSLError is an OSError
        return Reply(None, "", _reason(exc))
    finally:
        connection.close()


def _reason(reason: t.Any) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    return str(reason) or reason.__class__.__name__
