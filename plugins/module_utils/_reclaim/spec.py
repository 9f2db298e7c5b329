# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's options, checked in full before any process is read or touched.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import re
import signal
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.selection import GpuRef, SelectionError, parse_gpus
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import is_runtime_process
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import program_names

# A holder's launcher is found by climbing from its parent through an unbroken chain of
# processes that match one of these (see _reclaim/plan.py). Anchored at the program: a wrapper
# that merely mentions a server in its arguments (bash -c "...", SCREEN, tmux, sudo) is not a
# launcher, and neither is a cluster daemon (see DEFAULT_CLUSTER_DAEMONS).
_PY = r"^(\S*/)?python[0-9.]*(\s+-\S+)*\s+"
DEFAULT_LAUNCHER_PATTERNS = [
    _PY + r"-m\s+vllm\.entrypoints\.",
    r"^((\S*/)?python[0-9.]*\s+)?(\S*/)?vllm\s+serve\b",
    r"^VLLM::",
    r"^((\S*/)?python[0-9.]*\s+)?(\S*/)?torchrun\b|" + _PY + r"-m\s+torch\.distributed\.(run|launch)\b",
    _PY + r"-m\s+sglang\.launch_server\b|^((\S*/)?python[0-9.]*\s+)?(\S*/)?sglang\s+serve\b",
    r"^(\S*/)?text-generation-(launcher|server)\b",
    r"^(\S*/)?tritonserver\b",
]

# Processes that run a cluster rather than one job: never a launcher, and a climb stops below them.
# Ray's node daemons and its job and dashboard processes; Kubernetes' and Slurm's node agents.
DEFAULT_CLUSTER_DAEMONS = [
    r"^(\S*/)?(raylet|gcs_server)\b",
    r"^((\S*/)?python[0-9.]*\s+)?(\S*/)?ray\s+start\b",
    r"^((\S*/)?python[0-9.]*(\s+-\S+)*\s+)?\S*/ray/(dashboard|_private|autoscaler)/",
    r"^ray::(JobSupervisor|ServeController|ProxyActor|IDLE)\b",
    r"^(\S*/)?(kubelet|containerd|containerd-shim\S*|dockerd|slurmd|slurmstepd)\b",
]

# Processes that adopt orphans (init systems, container inits, service managers run as subreapers): a vLLM-shaped
# holder whose launcher chain hangs from one of them (or from PID 1) is an orphan, not a live job's child. The last
# one is the simulated GPU host's reaper (simulator/gpusim), which stands for systemd there.
DEFAULT_SUBREAPERS = [
    r"^(\S*/)?(systemd|init)(\s|$)",
    r"^(\S*/)?(tini|tini-static|dumb-init|docker-init|catatonit|podman-init)(\s|$)",
    r"^(\S*/)?python[0-9.]*(\s+-\S+)*\s+-m\s+gpusim\.reaper(\s|$)",
]

# Never signalled, whatever the options say: the driver's helpers and GPU monitoring. Matched against the
# program (the process name and the base name of its first command-line word), never the arguments, so a
# holder started with `--health-cmd nvidia-smi` or `--model /models/dcgm-tuned` is not protected by them.
ALWAYS_EXCLUDED_PROGRAMS = re.compile(r"^(nvidia-persistenced|nv-hostengine|nvidia-smi|nvidia-cuda-mps-\S*|dcgm\S*)$")

# A container runtime's own processes (podman, conmon, runc, crun, containerd and its shims, dockerd, docker-proxy, crio,
# and the inits they put in containers: catatonit, podman-init, docker-init; see _host/container.py is_runtime_process)
# are never signalled either: they hold no GPU, and ending one ends, orphans or restarts what it runs.
RUNTIME_PROCESS = "a container runtime's own process (always excluded)"
DRIVER_HELPER = "a driver helper or GPU monitor (always excluded)"

# Signals whose default action ends a process (signal(7): Term or Core). STOP, TSTP, TTIN and TTOU freeze a
# process with its memory held; CONT, CHLD, URG and WINCH are ignored by default: none of them may be a step.
TERMINATING_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2", "ABRT", "ALRM")

MAX_GRACE_S = 600.0
MAX_TIMEOUT_S = 3600.0
MAX_SETTLE_S = 60.0
# settle: auto (the default): after the GPUs read free, wait only while a process that could respawn a holder is alive
AUTO = "auto"
MAX_THRESHOLD_MIB = 1024 * 1024
# live_jobs: what a GPU kept busy only by holders this run left alone on purpose does to the verdict
LIVE_JOBS_FAIL = "fail"  # the default: such a GPU is not free, the run fails naming each holder
LIVE_JOBS_KEEP = "keep"  # the caller accepts them: listed in left_alone, not a failure
LIVE_JOBS = (LIVE_JOBS_FAIL, LIVE_JOBS_KEEP)
# containers: what a run does with a holder that runs in a container (never signalled, whatever this says)
CONTAINERS_REFUSE = "refuse"  # the default: the run fails before it signals anything, naming the container
CONTAINERS_STOP = "stop"  # the container is stopped through its runtime (docker stop, podman stop); never Kubernetes'
CONTAINERS = (CONTAINERS_REFUSE, CONTAINERS_STOP)
MANAGED_ID = re.compile(r"^[0-9a-f]{12,64}$")
# container_restart: what becomes of the restart policy of a container the run stopped
CONTAINER_RESTART_KEEP = "keep"  # the default: left as it is (the result says when the runtime may start it again)
CONTAINER_RESTART_DISABLE = "disable"  # set to no after the stop (docker update --restart=no, podman update --restart=no)
CONTAINER_RESTART = (CONTAINER_RESTART_KEEP, CONTAINER_RESTART_DISABLE)

# gpu_reclaim's defaults, written once: build_spec() falls back to them for a missing parameter, gpu_report_facts
# judges owners with them, and the module's ARGUMENT_SPEC names them from here.
DEFAULTS: t.Dict[str, t.Any] = {
    "gpus": None,
    "match": None,
    "exclude": [],
    "kill_tree": True,
    "launcher_patterns": DEFAULT_LAUNCHER_PATTERNS,
    "cluster_daemons": DEFAULT_CLUSTER_DAEMONS,
    "signals": ["TERM", "KILL"],
    "grace": 10.0,
    "timeout": 60.0,
    "settle": AUTO,
    "idle_threshold_mib": 1024,
    "ignore_foreign": False,
    "owner": None,
    "orphans_only": False,
    "subreapers": DEFAULT_SUBREAPERS,
    "live_jobs": LIVE_JOBS_FAIL,
    "containers": CONTAINERS_REFUSE,
    "container_restart": CONTAINER_RESTART_KEEP,
    "managed_containers": [],
    "secured": None,
}


def default(option: str) -> t.Any:
    """The default of one option (a copy, so callers may not change it)."""
    value = DEFAULTS[option]
    return list(value) if isinstance(value, list) else value


class Owner(t.NamedTuple):
    """The process whose leftovers a run may end (option ``owner``): its PID and, where known, its start time."""

    pid: int
    create_time: t.Optional[float]


class ReclaimSpec(t.NamedTuple):
    gpus: t.Optional[t.List[GpuRef]]
    match: t.List[t.Pattern[str]]
    exclude: t.List[t.Pattern[str]]
    kill_tree: bool
    launcher_patterns: t.List[t.Pattern[str]]
    signals: t.List[t.Tuple[str, int]]
    grace: float
    timeout: float
    memory_threshold_mib: int
    ignore_foreign: bool
    cluster_daemons: t.List[t.Pattern[str]] = []
    settle: t.Union[str, float] = AUTO  # AUTO, or a fixed window in seconds
    owner: t.Optional[Owner] = None
    orphans_only: bool = False
    subreapers: t.Sequence[t.Pattern[str]] = ()
    keep_live_jobs: bool = False  # live_jobs: keep
    containers: str = CONTAINERS_REFUSE
    container_restart: str = CONTAINER_RESTART_KEEP
    # ids (or their first 12 or more hex digits) of containers the caller stops itself before the real run
    managed_containers: t.Sequence[str] = ()


def regexes(option: str, values: t.Optional[t.Sequence[t.Any]]) -> t.List[t.Pattern[str]]:
    """The patterns compiled; raises SpecError naming ``option`` and a pattern that is empty or does not compile."""
    compiled = []
    for value in values or []:
        if not str(value).strip():
            raise SpecError("%s: %r is an empty pattern, which matches every process; remove it" % (option, value))
        try:
            compiled.append(re.compile(str(value)))
        except re.error as exc:
            raise SpecError("%s: %r is not a valid regular expression: %s" % (option, value, exc)) from None
    return compiled


_ASCII_NUMBER = re.compile(r"^[0-9]{1,9}$")


def parse_signal(option: str, value: t.Any) -> t.Tuple[str, int]:
    """('SIGTERM', 15) from 'TERM', 'SIGTERM', 'sigterm' or 15; only signals that end a process by default."""
    word = str(value).strip().upper()
    if _ASCII_NUMBER.match(word):
        try:
            sig = signal.Signals(int(word))
        except ValueError:
            raise SpecError("%s: %r is not a signal number on this host" % (option, value)) from None
    else:
        name = word if word.startswith("SIG") else "SIG" + word
        sig = getattr(signal.Signals, name, None) if re.match(r"^SIG[A-Z0-9]+$", name) else None
        if sig is None:
            raise SpecError("%s: %r is not a signal name (use e.g. TERM, INT, KILL)" % (option, value))
    if sig.name[3:] not in TERMINATING_SIGNALS:
        raise SpecError("%s: %r (%s) is not a signal that ends a process by default (it stops, continues or is ignored); "
                        "use one of %s" % (option, value, sig.name, ", ".join(TERMINATING_SIGNALS)))
    return sig.name, int(sig)


def _duration(option: str, value: t.Any, upper: float, zero: bool = False) -> float:
    if isinstance(value, bool):
        raise SpecError("%s: %r is not a number of seconds" % (option, value))
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise SpecError("%s: %r is not a number of seconds" % (option, value)) from None
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise SpecError("%s: %r must be a %s, finite number of seconds" % (option, value, "non-negative" if zero else "positive"))
    if seconds > upper:
        raise SpecError("%s: %r is more than the %g seconds allowed" % (option, value, upper))
    return seconds


def parse_settle(value: t.Any) -> t.Union[str, float]:
    """``settle``: AUTO (any case, spaces around it allowed) or a number of seconds from 0 to MAX_SETTLE_S."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        return _duration("settle", value, MAX_SETTLE_S, zero=True)
    except SpecError:
        raise SpecError("settle: %r is neither auto nor a number of seconds from 0 to %g" % (value, MAX_SETTLE_S)) from None


def _owner(value: t.Any) -> t.Optional[Owner]:
    """``owner`` checked: a PID above 1 (every process descends from PID 1) and, optionally, a start time."""
    if value is None:
        return None
    if not isinstance(value, t.Mapping):
        raise SpecError("owner: %r is not a dictionary with pid and create_time" % (value,))
    unknown = sorted(str(key) for key in value if key not in ("pid", "create_time"))
    if unknown:
        raise SpecError("owner: unknown key %s; it takes pid and create_time" % ", ".join(unknown))
    pid = value.get("pid")
    if isinstance(pid, str) and _ASCII_NUMBER.match(pid.strip()):
        pid = int(pid.strip())
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 2:
        raise SpecError("owner.pid: %r is not the PID of a server: give a process ID above 1 (every process descends from PID 1)" % (pid,))
    created = value.get("create_time")
    if created is not None:
        if isinstance(created, bool):
            raise SpecError("owner.create_time: %r is not a start time in seconds since the epoch" % (created,))
        try:
            created = float(created)
        except (TypeError, ValueError):
            raise SpecError("owner.create_time: %r is not a start time in seconds since the epoch" % (created,)) from None
        if not math.isfinite(created) or created <= 0:
            raise SpecError("owner.create_time: %r is not a start time in seconds since the epoch" % (value.get("create_time"),))
    return Owner(pid, created)


def build_spec(params: t.Mapping[str, t.Any]) -> ReclaimSpec:
    """Every option checked; raises SpecError naming the option and the value. A missing option takes its default."""
    def get(option: str) -> t.Any:
        return params[option] if option in params else default(option)

    try:
        gpus = parse_gpus(get("gpus"))
    except SelectionError as exc:
        raise SpecError(str(exc)) from None
    if get("match") is not None and not get("match"):
        raise SpecError("match: the list is empty; omit the option to end every holder")
    signals = [parse_signal("signals", value) for value in get("signals") or []]
    if not signals:
        raise SpecError("signals: the escalation ladder is empty; give at least one signal, e.g. [TERM, KILL]")
    if get("kill_tree") and not get("launcher_patterns"):
        raise SpecError("launcher_patterns: empty while kill_tree is true; set kill_tree: false to end holders only")
    live_jobs = get("live_jobs")
    if live_jobs not in LIVE_JOBS:
        raise SpecError("live_jobs: %r is neither %s" % (live_jobs, " nor ".join(LIVE_JOBS)))
    containers = get("containers")
    if containers not in CONTAINERS:
        raise SpecError("containers: %r is neither %s" % (containers, " nor ".join(CONTAINERS)))
    container_restart = get("container_restart")
    if container_restart not in CONTAINER_RESTART:
        raise SpecError("container_restart: %r is neither %s" % (container_restart, " nor ".join(CONTAINER_RESTART)))
    if container_restart == CONTAINER_RESTART_DISABLE and containers != CONTAINERS_STOP:
        raise SpecError("container_restart: %r applies to the containers a run stops, and containers is %r: set containers: stop "
                        "as well, or leave container_restart at keep" % (container_restart, containers))
    managed = [str(value) for value in get("managed_containers") or []]
    bad = [value for value in managed if not MANAGED_ID.match(value)]
    if bad:
        raise SpecError("managed_containers: %r are not container ids (12 to 64 lowercase hex digits)" % (bad,))
    # idle_threshold_mib, the collection's one name for it; memory_threshold_mib is its deprecated alias (the module's
    # argument spec warns about it and copies its value to the new name; a caller that gives only the old name gets it)
    threshold = params["memory_threshold_mib"] if "memory_threshold_mib" in params else get("idle_threshold_mib")
    if not isinstance(threshold, int) or isinstance(threshold, bool) or not 0 <= threshold <= MAX_THRESHOLD_MIB:
        raise SpecError("idle_threshold_mib: %r must be a whole number of MiB from 0 to %d" % (threshold, MAX_THRESHOLD_MIB))
    return ReclaimSpec(
        gpus=gpus,
        match=regexes("match", get("match")),
        exclude=regexes("exclude", list(get("exclude") or [])),
        kill_tree=bool(get("kill_tree")),
        launcher_patterns=regexes("launcher_patterns", get("launcher_patterns")),
        signals=signals,
        grace=_duration("grace", get("grace"), MAX_GRACE_S),
        timeout=_duration("timeout", get("timeout"), MAX_TIMEOUT_S),
        memory_threshold_mib=threshold,
        ignore_foreign=bool(get("ignore_foreign")),
        cluster_daemons=regexes("cluster_daemons", get("cluster_daemons")),
        settle=parse_settle(get("settle")),
        owner=_owner(get("owner")),
        orphans_only=bool(get("orphans_only")),
        subreapers=regexes("subreapers", get("subreapers")),
        keep_live_jobs=live_jobs == LIVE_JOBS_KEEP,
        containers=containers,
        container_restart=container_restart,
        managed_containers=tuple(managed),
    )


def always_excluded(name: t.Optional[str], cmdline: t.Optional[t.Sequence[str]]) -> t.Optional[str]:
    """Why a process is never signalled whatever the options say (RUNTIME_PROCESS or DRIVER_HELPER), by program only;
    None for any other."""
    if is_runtime_process(name, cmdline):
        return RUNTIME_PROCESS
    if any(ALWAYS_EXCLUDED_PROGRAMS.match(program) for program in program_names(name, cmdline)):
        return DRIVER_HELPER
    return None


def is_excluded(spec: ReclaimSpec, name: t.Optional[str], cmdline: t.Optional[t.Sequence[str]]) -> bool:
    """Never signalled: a built-in exclusion (by program) or a pattern of ``exclude`` (name or command line)."""
    return always_excluded(name, cmdline) is not None or matches_any(spec.exclude, name, cmdline)


def excluder(spec: ReclaimSpec) -> t.Callable[[t.Mapping[str, t.Any]], bool]:
    """is_excluded() of a process's description (its name and cmdline), as verify.py's judgements ask it."""
    return lambda info: is_excluded(spec, info["name"], info["cmdline"])


def matches_any(patterns: t.Sequence[t.Pattern[str]], name: t.Optional[str], cmdline: t.Optional[t.Sequence[str]]) -> bool:
    """True when a pattern finds the process name or its command line (words joined by spaces)."""
    texts = [name or "", " ".join(cmdline or [])]
    return any(p.search(text) for p in patterns for text in texts if text)


def budget_warning(spec: ReclaimSpec) -> t.Optional[str]:
    """A warning when the ladder may outlast ``timeout``: its waits are then cut to share the time left."""
    ladder = spec.grace * len(spec.signals)
    if spec.timeout >= ladder:
        return None
    return ("timeout %g s is shorter than the signal ladder may take (grace %g s x %d signals = %g s): each step waits at most "
            "its share of the time left, so a slow process gets less than grace before the next signal" % (
                spec.timeout, spec.grace, len(spec.signals), ladder))
