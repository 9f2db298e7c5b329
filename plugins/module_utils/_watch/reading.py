# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_watch): the metrics endpoint of a GPU host (docs/watch.md). It may import the flat files of
# module_utils, _http, _host, _gpu, _reclaim, _server and _report (whose reading and classification it shows); never a
# module or a plugin, and no other package imports it.

"""One reading of the host for the metrics endpoint: the fleet report's (gpu_facts' GPUs and holders, each holder's
owner by gpu_reclaim's rule, the role's servers and their /health), the servers' systemd units, and the generation
check of _server.generation, sent at most once per interval per server and reused between scrapes.

Nothing here changes anything on the host: records are read, /health and one short completion are asked.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import subprocess
import threading
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.state import DEFAULT_THRESHOLD_MIB
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import read_environ
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get
from ansible_collections.gpuops.fleet.plugins.module_utils._report.model import host_entry
from ansible_collections.gpuops.fleet.plugins.module_utils._report.reading import DEFAULT_STATE_DIR, run_reading
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import api_key_of
from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import GenerationResult, check_generation
from ansible_collections.gpuops.fleet.plugins.module_utils._server.unit import ALIVE_STATES, main_pid, parse_show, show_argv, start_time
from ansible_collections.gpuops.fleet.plugins.module_utils._watch import metrics

Check = t.Callable[[str, t.Optional[str], float, t.Optional[str]], GenerationResult]
RunCommand = t.Callable[[t.List[str]], t.Tuple[int, str, str]]


class Settings(t.NamedTuple):
    host: str  # the host label of every series
    interval: float  # seconds between two generation checks of one server
    state_dir: str = DEFAULT_STATE_DIR
    health_host: str = "127.0.0.1"
    health_timeout: float = 3.0
    generate_timeout: float = 10.0
    threshold_mib: int = DEFAULT_THRESHOLD_MIB


def run_command(argv: t.List[str]) -> t.Tuple[int, str, str]:
    """A command's (rc, stdout, stderr), as AnsibleModule.run_command gives them (rc 127 when it cannot be run)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


class Prober:
    """The generation check of each server, at most once per ``interval`` seconds: a scrape sooner than that reuses
    the last answer. A new process of the server (another PID or start time) is checked at once."""

    def __init__(self, interval: float, timeout: float, check: Check = check_generation,
                 clock: t.Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.timeout = timeout
        self._check = check
        self._clock = clock
        self._last: t.Dict[str, t.Tuple[t.Any, float, GenerationResult]] = {}
        self._lock = threading.Lock()

    def result(self, server: str, identity: t.Any, url: str, model: t.Optional[str],
               api_key: t.Optional[str]) -> t.Tuple[GenerationResult, float]:
        """(the check's result, its age in seconds) for ``server``, whose process is ``identity``."""
        with self._lock:
            now = self._clock()
            last = self._last.get(server)
            if last is None or last[0] != identity or now - last[1] >= self.interval:
                found = self._check(url, model, self.timeout, api_key or None)
                last = (identity, now, found)
                self._last[server] = last
            return last[2], now - last[1]

    def forget(self, keep: t.Iterable[str]) -> None:
        """Drop the answers of servers no longer recorded."""
        kept = set(keep)
        with self._lock:
            for name in list(self._last):
                if name not in kept:
                    del self._last[name]


class Startups:
    """Start-ups this endpoint saw per server: each new (PID, start time) of its process counts one."""

    def __init__(self) -> None:
        self._seen: t.Dict[str, t.Tuple[t.Any, int]] = {}

    def count(self, server: str, identity: t.Optional[t.Tuple[t.Any, t.Any]]) -> int:
        last, counted = self._seen.get(server, (None, 0))
        if identity is not None and identity != last:
            counted += 1
            last = identity
        self._seen[server] = (last, counted)
        return counted


def _port_of(argv: t.Sequence[t.Any]) -> t.Optional[str]:
    """The --port of a vLLM command line (vLLM's default, 8000, when it names none)."""
    words = [str(word) for word in argv or []]
    for index, word in enumerate(words):
        if word == "--port" and index + 1 < len(words):
            return words[index + 1]
        if word.startswith("--port="):
            return word[len("--port="):]
    return "8000"


def _key_of(psutil: t.Any, pid: t.Optional[int]) -> t.Optional[str]:
    """The API key the running server requires (its command line, else its VLLM_API_KEY), read from its process; None
    when it requires none or the process cannot be read."""
    if not pid:
        return None
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return None
    return api_key_of(cmdline, read_environ(pid)) or None


def server_state(entry: t.Mapping[str, t.Any], settings: Settings, psutil: t.Any, prober: Prober, startups: Startups,
                 run: RunCommand = run_command, get_health: t.Optional[t.Callable[[str], bool]] = None) -> metrics.ServerState:
    """One server of the fleet report's reading (_report.reading.read_servers) as the endpoint shows it."""
    name = str(entry.get("name"))
    mode = "container" if entry.get("container") else "systemd" if entry.get("unit") else "process"
    pid, up, healthy, restarts = entry.get("pid"), bool(entry.get("running")), bool(entry.get("healthy")), None
    created = entry.get("create_time")
    port = entry.get("port")
    if mode == "systemd":
        rc, out, _err = run(show_argv("systemctl", str(entry["unit"])))
        props = parse_show(out) if rc == 0 else {}
        pid = main_pid(props)
        up = props.get("ActiveState") in ALIVE_STATES and pid is not None
        created = start_time(psutil, pid)
        try:
            restarts = int(props.get("NRestarts") or 0)
        except ValueError:
            restarts = 0
        port = _port_of(entry.get("argv") or [])
        if up and port and get_health is not None:
            healthy = get_health("http://%s:%s/health" % (settings.health_host, port))
    generates, age = None, None
    group = entry.get("group") or {}
    serves_here = not group.get("rank")  # a headless rank of a server across hosts serves no API of its own
    if up and healthy and port and serves_here:
        found, age = prober.result(name, (pid, created), "http://%s:%s" % (settings.health_host, port), entry.get("model"),
                                   _key_of(psutil, pid))
        generates = found.ok
    count = startups.count(name, (pid, created) if up and pid else None)
    return metrics.ServerState(name=name, model=entry.get("model"), port=port, mode=mode, pid=pid if up else None, up=up,
                               health=healthy and up, generates=generates, generation_age_s=age,
                               start_time=created if up else None, startups=count, restarts=restarts)


class Watch:
    """The endpoint's state between scrapes: settings, the generation answers and the start-ups seen."""

    def __init__(self, settings: Settings, pynvml: t.Any, psutil: t.Any, check: Check = check_generation,
                 clock: t.Callable[[], float] = time.monotonic, run: RunCommand = run_command,
                 find_smi: t.Callable[[], t.Optional[str]] = lambda: None) -> None:
        self.settings = settings
        self.pynvml = pynvml
        self.psutil = psutil
        self.prober = Prober(settings.interval, settings.generate_timeout, check, clock)
        self.startups = Startups()
        self.run = run
        self.find_smi = find_smi
        self._lock = threading.Lock()

    def _health(self, url: str) -> bool:
        return http_get(url, self.settings.health_timeout).status == 200

    def samples(self) -> t.List[metrics.Sample]:
        """One reading of the host, as samples; a reading that fails is a sample saying why."""
        settings = self.settings
        with self._lock:  # one reading at a time: two scrapes at once share the prober and the counts
            began, at = time.monotonic(), time.time()
            try:
                found, error = self._read(), None
            except Exception as exc:  # pylint: disable=broad-except  # a reading that breaks is a reading that failed, with why
                found, error = [], "%s: %s" % (type(exc).__name__, exc)
            if isinstance(found, str):
                found, error = [], found
            return metrics.reading_samples(settings.host, error is None, error, time.monotonic() - began, at) + found

    def _read(self) -> t.Union[t.List[metrics.Sample], str]:
        """The host's samples, or why the reading failed."""
        settings = self.settings
        params = {"state_dir": settings.state_dir, "health_host": settings.health_host, "health_timeout": settings.health_timeout}
        result, _warnings, failed = run_reading(params, self.pynvml, self.psutil, lambda name: None, self.find_smi, self.run)
        if failed:
            return str(result.get("msg") or "the reading failed without a message")
        host = host_entry(settings.host, result, settings.threshold_mib)
        servers = [server_state(entry, settings, self.psutil, self.prober, self.startups, self.run, self._health)
                   for entry in result.get("servers") or []]
        self.prober.forget(server.name for server in servers)
        return metrics.gpu_samples(settings.host, host["gpus"]) + metrics.server_samples(settings.host, servers)

    def text(self) -> str:
        return metrics.exposition(self.samples())
