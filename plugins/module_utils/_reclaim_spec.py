# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's options, checked in full before any process is read or touched.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import re
import signal
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._selection import GpuRef, SelectionError, parse_gpus

# The highest ancestor of a holder that matches one of these is its launcher: the
# process that would respawn workers or keep the port if it were left alive.
# Anchored at the program: a wrapper that merely mentions a server in its
# arguments (bash -c "...", SCREEN, tmux, sudo) is not a launcher.
_PY = r"^(\S*/)?python[0-9.]*(\s+-\S+)*\s+"
DEFAULT_LAUNCHER_PATTERNS = [
    _PY + r"-m\s+vllm\.entrypoints\.",
    r"^((\S*/)?python[0-9.]*\s+)?(\S*/)?vllm\s+serve\b",
    r"^VLLM::",
    r"^(\S*/)?(raylet|gcs_server)\b|^ray::|^((\S*/)?python[0-9.]*\s+)?(\S*/)?ray\s+start\b",
    r"^((\S*/)?python[0-9.]*\s+)?(\S*/)?torchrun\b|" + _PY + r"-m\s+torch\.distributed\.(run|launch)\b",
    _PY + r"-m\s+sglang\.launch_server\b|^((\S*/)?python[0-9.]*\s+)?(\S*/)?sglang\s+serve\b",
    r"^(\S*/)?text-generation-(launcher|server)\b",
    r"^(\S*/)?tritonserver\b",
]

# Never signalled, whatever the options say: the driver's helpers and GPU monitoring.
ALWAYS_EXCLUDED = [r"nvidia-persistenced", r"nv-hostengine", r"(^|/)dcgm", r"nvidia-smi"]


class SpecError(ValueError):
    """An option value that cannot be used; the message names the option and the value."""


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


def _regexes(option: str, values: t.Optional[t.Sequence[t.Any]]) -> t.List[t.Pattern[str]]:
    compiled = []
    for value in values or []:
        try:
            compiled.append(re.compile(str(value)))
        except re.error as exc:
            raise SpecError("%s: %r is not a valid regular expression: %s" % (option, value, exc)) from None
    return compiled


def parse_signal(option: str, value: t.Any) -> t.Tuple[str, int]:
    """('SIGTERM', 15) from 'TERM', 'SIGTERM', 'sigterm' or 15."""
    word = str(value).strip().upper()
    if word.isdigit():
        try:
            sig = signal.Signals(int(word))
        except ValueError:
            raise SpecError("%s: %r is not a signal number on this host" % (option, value)) from None
        return sig.name, int(sig)
    name = word if word.startswith("SIG") else "SIG" + word
    sig = getattr(signal.Signals, name, None)
    if sig is None or name.startswith("SIG_"):
        raise SpecError("%s: %r is not a signal name (use e.g. TERM, INT, KILL)" % (option, value))
    return sig.name, int(sig)


def _duration(option: str, value: t.Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise SpecError("%s: %r is not a number of seconds" % (option, value)) from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise SpecError("%s: %r must be a positive, finite number of seconds" % (option, value))
    return seconds


def build_spec(params: t.Mapping[str, t.Any]) -> ReclaimSpec:
    """Every option checked; raises SpecError (or SelectionError) naming the option and the value."""
    try:
        gpus = parse_gpus(params.get("gpus"))
    except SelectionError as exc:
        raise SpecError(str(exc)) from None
    if params.get("match") is not None and not params["match"]:
        raise SpecError("match: the list is empty; omit the option to end every holder")
    signals = [parse_signal("signals", value) for value in params.get("signals") or []]
    if not signals:
        raise SpecError("signals: the escalation ladder is empty; give at least one signal, e.g. [TERM, KILL]")
    if params.get("kill_tree", True) and not params.get("launcher_patterns", DEFAULT_LAUNCHER_PATTERNS):
        raise SpecError("launcher_patterns: empty while kill_tree is true; set kill_tree: false to end holders only")
    threshold = params.get("memory_threshold_mib", 1024)
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0:
        raise SpecError("memory_threshold_mib: %r must be a whole number of MiB, 0 or more" % (threshold,))
    return ReclaimSpec(
        gpus=gpus,
        match=_regexes("match", params.get("match")),
        exclude=_regexes("exclude", list(params.get("exclude") or [])) + [re.compile(p) for p in ALWAYS_EXCLUDED],
        kill_tree=bool(params.get("kill_tree", True)),
        launcher_patterns=_regexes("launcher_patterns", params.get("launcher_patterns", DEFAULT_LAUNCHER_PATTERNS)),
        signals=signals,
        grace=_duration("grace", params.get("grace", 10)),
        timeout=_duration("timeout", params.get("timeout", 60)),
        memory_threshold_mib=threshold,
        ignore_foreign=bool(params.get("ignore_foreign", False)),
    )


def matches_any(patterns: t.Sequence[t.Pattern[str]], name: t.Optional[str], cmdline: t.Optional[t.Sequence[str]]) -> bool:
    """True when a pattern finds the process name or its command line (words joined by spaces)."""
    texts = [name or "", " ".join(cmdline or [])]
    return any(p.search(text) for p in patterns for text in texts if text)


def budget_warning(spec: ReclaimSpec) -> t.Optional[str]:
    """A warning when the ladder alone may outlast ``timeout``: the memory then gets a single reading."""
    ladder = spec.grace * len(spec.signals)
    if spec.timeout >= ladder:
        return None
    return ("timeout %g s is shorter than the signal ladder may take (grace %g s x %d signals = %g s): "
            "if processes are slow to exit, the memory gets one reading only" % (spec.timeout, spec.grace, len(spec.signals), ladder))
