# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_matrix): the report of playbooks/benchmark_matrix.yml, written on the controller from the run folder's
# files. It stands alone: it imports only the flat files of module_utils, no other package, never a module or a plugin.

"""Charts as inline SVG text, drawn here in Python: a page shows them with scripts off and fetches nothing.

One chart: grouped bars. Each group (a configuration, a host, a turn) has one bar per series (a host, a percentile,
a side of a gate), in the series' colour, with its value written above it and, when given, a whisker from its low to
its high value (the spread over repeats). Every bar is a ``<g class="point">`` with ``data-group``, ``data-series`` and
``data-value``; a bar without a value is drawn as ``n/a`` (``data-value=""``), so each group x series has one point.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._html import esc

# colour-blind-safe (Okabe-Ito), one per series in turn
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")
HEIGHT = 260
TOP, BOTTOM, LEFT, RIGHT = 24, 56, 58, 12
BAR, GAP = 26, 22
CHAR = 6.5  # the width of a character of the 11px labels, about
LABEL_CHARS = 28  # a group's label longer than this is cut (it is whole in each bar's tooltip and in the tables)
LEGEND = 140  # the width of one entry of the legend (a name of up to 18 characters)


class Bar(t.NamedTuple):
    """One bar: its series' name, its value (None: not measured) and its whisker's ends (None: no whisker)."""
    series: str
    value: t.Optional[float]
    low: t.Optional[float] = None
    high: t.Optional[float] = None


Group = t.Tuple[str, t.Sequence[Bar]]


def nice_ticks(top: float, count: int = 5) -> t.List[float]:
    """Round steps from 0 to at least ``top`` (steps of 1, 2 or 5 times a power of ten), about ``count`` of them."""
    if top <= 0 or math.isnan(top) or math.isinf(top):
        return [0.0, 1.0]
    raw = top / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    ticks = [0.0]
    while ticks[-1] < top:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def figure(value: float) -> str:
    """A value as the chart writes it: at most one decimal for large numbers, two for small ones."""
    return ("%.0f" if abs(value) >= 1000 else "%.1f" if abs(value) >= 10 else "%.2f") % value


def _series(groups: t.Sequence[Group]) -> t.List[str]:
    names: t.List[str] = []
    for _label, bars in groups:
        names += [item.series for item in bars if item.series not in names]
    return names


def bar_chart(groups: t.Sequence[Group], unit: str, title: str, chart_id: str) -> str:
    """The chart as a ``<figure>``: ``title`` as its caption, then the ``<svg>`` with a legend of the series under it,
    scaled down to the page's width."""
    series = _series(groups)
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    values = [v for _l, bars in groups for item in bars for v in (item.value, item.high) if v is not None and not math.isnan(v)]
    ticks = nice_ticks(max(values) if values else 0.0)
    top = ticks[-1]
    longest = max([len(label) for label, _b in groups] + [0])
    per_group = max(max([len(bars) for _l, bars in groups] + [1]) * BAR + GAP, min(longest, LABEL_CHARS) * CHAR + 10)
    fits = max(4, int((per_group - 6) // CHAR))
    width = max(LEFT + RIGHT + max(1, len(groups)) * per_group, 360)
    columns = max(1, (width - LEFT) // LEGEND)
    legend_rows = int(math.ceil(len(series) / float(columns)))
    height = HEIGHT + legend_rows * 16
    plot = HEIGHT - TOP - BOTTOM

    def y(value: float) -> float:
        return TOP + plot - (plot * max(0.0, value) / top if top else 0.0)

    svg_id = esc(chart_id)
    out = ['<figure class="chart"><figcaption>%s</figcaption>' % esc(title),
           '<svg class="chart" id="%s" role="img" viewBox="0 0 %d %d" width="%d" height="%d" aria-labelledby="%s-title">'
           '<title id="%s-title">%s</title>' % (svg_id, width, height, width, height, svg_id, svg_id, esc(title))]
    for tick in ticks:
        out.append('<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e4ea"/>'
                   '<text class="tick" x="%d" y="%.1f" text-anchor="end" font-size="10" fill="#555">%s</text>' % (
                       LEFT, width - RIGHT, y(tick), y(tick), LEFT - 4, y(tick) + 3, esc("%g" % tick)))
    out.append('<text x="12" y="%d" font-size="11" fill="#333" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>' % (
        TOP + plot // 2, TOP + plot // 2, esc(unit)))
    for g, (label, bars) in enumerate(groups):
        x0 = LEFT + g * per_group + GAP / 2.0
        centre = x0 + len(bars) * BAR / 2.0
        for b, item in enumerate(bars):
            x = x0 + b * BAR
            mid = x + BAR / 2.0
            known = item.value is not None and not math.isnan(item.value)
            value = float(item.value) if item.value is not None and known else 0.0
            tip = "%s, %s: %s %s" % (label, item.series, figure(value) if known else "n/a", unit)
            if known and item.low is not None and item.high is not None:
                tip += " (%s - %s)" % (figure(item.low), figure(item.high))
            out.append('<g class="point" data-group="%s" data-series="%s" data-value="%s"><title>%s</title>' % (
                esc(label), esc(item.series), esc(repr(value) if known else ""), esc(tip)))
            if known:
                out.append('<rect class="bar" x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"/>' % (
                    x + 2, y(value), BAR - 4, TOP + plot - y(value), colour[item.series]))
                label_y = y(value) - 3
                if item.low is not None and item.high is not None:
                    out.append('<path class="whisker" d="M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f" stroke="#222" fill="none"/>' % (
                        mid, y(item.low), y(item.high), mid - 4, y(item.low), mid + 4, mid - 4, y(item.high), mid + 4))
                    label_y = min(label_y, y(item.high) - 3)
                out.append('<text class="value" x="%.1f" y="%.1f" text-anchor="middle" font-size="9" fill="#222">%s</text>' % (
                    mid, label_y, esc(figure(value))))
            else:
                out.append('<text class="value" x="%.1f" y="%.1f" text-anchor="middle" font-size="9" fill="#b00020">n/a</text>' % (
                    mid, TOP + plot - 3))
            out.append("</g>")
        out.append('<text class="group" x="%.1f" y="%d" text-anchor="middle" font-size="11" fill="#222">%s</text>' % (
            centre, TOP + plot + 14, esc(label if len(label) <= fits else label[:fits - 1] + "\u2026")))
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#888"/>' % (LEFT, width - RIGHT, TOP + plot, TOP + plot))
    for i, name in enumerate(series if legend_rows else []):
        lx, ly = LEFT + (i % columns) * LEGEND, HEIGHT - 20 + (i // columns) * 16
        out.append('<g class="legend" data-series="%s"><rect x="%d" y="%d" width="10" height="10" fill="%s"/>'
                   '<text x="%d" y="%d" font-size="11" fill="#222">%s</text></g>' % (
                       esc(name), lx, ly, colour[name], lx + 14, ly + 9, esc(name if len(name) <= 18 else name[:17] + "\u2026")))
    out.append("</svg></figure>")
    return "".join(out)
