# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Plain statistics for the benchmark, written to give numpy's answers (vllm bench serve uses numpy).

mean, median, std (population, numpy's default ddof=0), percentile (numpy's default: linear between the two
closest ranks), and a Student t confidence interval for the mean of a few repeats.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import typing as t

# Two-sided 95% quantiles of Student's t distribution (0.975 one-sided) by degrees of freedom.
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
    29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}
_Z975 = 1.960


def mean(values: t.Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def median(values: t.Sequence[float]) -> float:
    return percentile(values, 50.0)


def std(values: t.Sequence[float]) -> float:
    """Population standard deviation (ddof=0), as numpy.std."""
    if not values:
        return 0.0
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / len(values))


def sample_std(values: t.Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1))


def percentile(values: t.Sequence[float], p: float, presorted: bool = False) -> float:
    """numpy.percentile(values, p) with linear interpolation; 0 for no values (vllm bench serve's `values or 0`)."""
    if not values:
        return 0.0
    ordered = values if presorted else sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile_label(p: float) -> str:
    """The key prefix of a percentile: p50, p90, p99, and p99_9 for 99.9 (vllm bench serve writes p99.9; a dot in a
    result key would need brackets in every Jinja expression, so the module writes an underscore)."""
    return "p" + percentile_text(p).replace(".", "_")


def percentile_text(p: float) -> str:
    """A percentile as vllm bench serve names it in its result keys: 99 for 99.0, 99.9 for 99.9."""
    return str(int(p)) if float(p) == int(p) else "%.6g" % p


def t_quantile_975(dof: int) -> float:
    """The 0.975 quantile of Student's t with `dof` degrees of freedom (table; between entries the next lower
    entry, which is wider, so the interval errs on the safe side)."""
    if dof < 1:
        raise ValueError("degrees of freedom must be at least 1")
    if dof in _T975:
        return _T975[dof]
    if dof > 120:
        return _Z975
    return _T975[max(k for k in _T975 if k <= dof)]


def spread(values: t.Sequence[float]) -> t.Dict[str, t.Any]:
    """How a figure varied across repeats: median (the headline), min, max, mean, sample std and, from three
    repeats on, the 95% confidence interval of the mean (Student t)."""
    result: t.Dict[str, t.Any] = {
        "median": median(values),
        "min": min(values) if values else 0.0,
        "max": max(values) if values else 0.0,
        "mean": mean(values),
        "stdev": sample_std(values),
        "n": len(values),
        "ci95": None,
    }
    if len(values) >= 3:
        half = t_quantile_975(len(values) - 1) * sample_std(values) / math.sqrt(len(values))
        result["ci95"] = [result["mean"] - half, result["mean"] + half]
    return result
