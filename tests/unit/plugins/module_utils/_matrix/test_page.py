# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""report.html of a benchmark matrix (_matrix/page, _matrix/chart_svg) from hand-made measurements: hostile names come
out as text, nothing is fetched from anywhere, the charts have one point per configuration x host, and the sections of
a workload's results appear exactly when the results carry them."""

from __future__ import annotations

import html.parser
import re
import typing as t

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import analysis, chart_svg, page

EVIL = "<script>alert(1)</script>\"'&"
WORKLOAD = {"kind": "dataset", "file": "/data/<evil>.jsonl", "sha256": "ab12cd34ef56" + "0" * 52, "requests": 64,
            "prompt_len": {"min": 12, "p50": 240, "p90": 800, "max": 1900}, "output_len": {"min": 2, "p50": 128, "p90": 300, "max": 512}}
PER_TURN = [{"turn": 1, "requests": 8, "ttft_ms": {"mean": 40.0, "p50": 39.0, "p90": 45.0, "p99": 48.0}, "cached_tokens": 0},
            {"turn": 2, "requests": 8, "ttft_ms": {"mean": 12.0, "p50": 11.0, "p90": 14.0, "p99": 15.0}, "cached_tokens": 2048}]
SLIP = {"mean": 3.0, "p50": 2.0, "p90": 8.0, "p99": 45.0, "max": 60.0}
CACHE = {"queries": 4096, "hits": 2048, "hit_rate": 0.5}


def run(value: float, p99_ttft: float = 30.0) -> t.Dict[str, t.Any]:
    return {"completed": 4, "median_tpot_ms": 1000.0 / value, "p50_ttft_ms": 20.0, "p90_ttft_ms": 25.0, "p99_ttft_ms": p99_ttft,
            "p50_itl_ms": 1000.0 / value, "p90_itl_ms": 22.5, "p99_itl_ms": 24.0, "p50_tpot_ms": 21.0, "p90_tpot_ms": 21.5,
            "p99_tpot_ms": 22.0}


def matrix(names: t.Sequence[str], hosts: t.Sequence[str], decode: t.Mapping[str, t.Sequence[t.Optional[float]]],
           **extra: t.Any) -> t.Dict[str, t.Any]:
    """analysis.analyse() of hand-made cells; ``extra`` goes into every measured cell's summary."""
    repeats = len(next(iter(decode.values())))
    plan = {"hosts": list(hosts), "configs": [{"name": n, "env": {"X": n}} for n in names], "baseline": names[0], "repeats": repeats,
            "started": "2026-01-01T00:00:00Z", "benchmark": {"endpoint": "completions", "input_len": 16, "output_len": 32}}
    cells, order = [], 0
    for host in hosts:
        for index in range(repeats):
            for name in names:
                order += 1
                value = decode[name][index]
                cell: t.Dict[str, t.Any] = {"host": host, "config": name, "round": index + 1, "order": order}
                if value is None:
                    cell.update(status="failed", stage="restart", task="Wait for /health", error=EVIL)
                else:
                    cell.update(status="ok", summary=dict({"decode_tok_s": value, "median_tpot_ms": 1000.0 / value}, **extra),
                                benchmark={"runs": [run(value, 30.0 + index)]})
                cells.append(cell)
    return analysis.analyse(plan, cells)


class Tags(html.parser.HTMLParser):
    """Every start tag of a page, as (tag, attributes)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: t.List[t.Tuple[str, t.Dict[str, t.Optional[str]]]] = []
        self.data: t.List[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.data.append(data)


def points(text: str, chart_id: str) -> t.List[t.Dict[str, t.Optional[str]]]:
    svg = re.search(r'<svg class="chart" id="%s".*?</svg>' % re.escape(chart_id), text, re.S)
    assert svg, chart_id
    return [attrs for tag, attrs in Tags(svg.group(0)).tags if tag == "g" and "point" in (attrs.get("class") or "").split()]


def assert_self_contained(text: str) -> None:
    assert "http://" not in text and "https://" not in text and "//" not in re.sub(r"<[^>]*>", "", text).replace("://", "")
    for tag, attrs in Tags(text).tags:
        assert tag not in ("script", "link", "img", "iframe", "object", "embed"), (tag, attrs)
        assert not {"src", "href", "srcset"} & set(attrs) or (attrs.get("href") or "").startswith("#"), (tag, attrs)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
    policy = [a["content"] for tag, a in Tags(text).tags if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert policy and "default-src 'none'" in policy[0] and "script-src 'none'" in policy[0]


def test_hostile_names_are_text_and_nothing_is_fetched():
    names = ["base", EVIL, "a&b"]
    report = matrix(names, ["h1", "<b>h2</b>"], {"base": [47.3, 47.1], EVIL: [57.6, None], "a&b": [45.5, 45.4]})
    text = page.render_page(report)
    assert_self_contained(text)
    assert "<script>alert" not in text and "<b>h2</b>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;" in text
    parsed = Tags(text)
    seen = " ".join(parsed.data)
    assert EVIL in seen and "<b>h2</b>" in seen  # shown as text, both in the tables and the charts
    assert [a["data-config"] for tag, a in parsed.tags if tag == "tr" and a.get("data-config") and not a.get("data-host")] == names


def test_the_decode_chart_has_one_point_per_configuration_and_host_with_its_table_figures():
    report = matrix(["base", "LL", "crash"], ["h1", "h2"], {"base": [47.3, 47.1], "LL": [57.6, 57.2], "crash": [None, None]})
    text = page.render_page(report)
    found = points(text, "decode-chart")
    assert [(p["data-group"], p["data-series"]) for p in found] == [(n, h) for n in ("base", "LL", "crash") for h in ("h1", "h2")]
    for p in found:
        expected = report["per_host"][p["data-series"]]["configs"][p["data-group"]]["decode_tok_s"]
        assert (float(p["data-value"]) if p["data-value"] else None) == expected
    assert ('<tr class="ok" data-config="LL"><td>LL</td><td><code>X=LL</code></td><td>4 / 4</td><td class="num" data-value="%r">57.40</td>'
            % report["fleet"]["LL"]["decode_tok_s"]) in text
    assert '<tr class="failed" data-config="crash"><td>crash</td><td><code>X=crash</code></td><td>0 / 4</td>' in text
    assert 'id="failures-table"' in text and 'data-winner="LL"' in text
    # the latency charts: p50, p90 and p99 per configuration; the fleet's p99 TTFT is the median over the rounds
    ttft = points(text, "ttft-chart")
    assert [(p["data-group"], p["data-series"]) for p in ttft] == [(n, q) for n in ("base", "LL", "crash") for q in ("p50", "p90", "p99")]
    assert report["fleet"]["LL"]["latency"]["ttft_ms"]["p99"] == 30.5
    assert [p["data-value"] for p in ttft if p["data-group"] == "crash"] == ["", "", ""]


def test_optional_sections_are_absent_without_their_keys():
    text = page.render_page(matrix(["base", "LL"], ["h1"], {"base": [47.3], "LL": [57.6]}))
    for section in ('id="workload"', 'id="per-turn"', 'id="slip"', 'id="prefix-cache"', 'id="slip-warning"'):
        assert section not in text
    assert 'id="latency"' in text and 'id="decode"' in text


def test_optional_sections_show_what_the_results_carry():
    report = matrix(["base", "LL"], ["h1", "h2"], {"base": [47.3], "LL": [57.6]}, workload=WORKLOAD, per_turn=PER_TURN,
                    schedule_slip_ms=SLIP, prefix_cache=CACHE)
    text = page.render_page(report)
    assert_self_contained(text)
    assert 'data-kind="dataset"' in text and "&lt;evil&gt;.jsonl" in text and ">ab12cd34ef56</code>" in text
    assert re.search(r'data-length="prompt_len"><td>prompt length</td><td class="num" data-value="12.0">12</td>'
                     r'<td class="num" data-value="240.0">240</td>', text)
    turns = points(text, "turn-chart")
    assert [(p["data-group"], p["data-series"], p["data-value"]) for p in turns] == [
        ("turn 1", "base", "39.0"), ("turn 1", "LL", "39.0"), ("turn 2", "base", "11.0"), ("turn 2", "LL", "11.0")]
    assert report["fleet"]["LL"]["per_turn"][1]["cached_tokens"] == 2048 and report["fleet"]["LL"]["per_turn"][1]["measurements"] == 2
    assert 'id="slip-warning"' in text and "The client, not the server, was late" in text and "45.0 ms for base" in text
    assert report["fleet"]["base"]["prefix_cache"] == {"queries": 8192, "hits": 4096, "hit_rate": 0.5}
    assert re.search(r'<tr data-series="LL"><td>LL</td><td class="num" data-value="8192.0">8192</td>'
                     r'<td class="num" data-value="4096.0">4096</td><td class="num" data-value="50.0">50.0 %</td></tr>', text)


def test_a_small_slip_gives_no_warning_and_keys_of_the_benchmark_result_are_read_too():
    report = matrix(["base"], ["h1"], {"base": [47.3]}, schedule_slip_ms={"mean": 0.2, "p50": 0.1, "p90": 0.4, "p99": 0.9, "max": 2.0})
    text = page.render_page(report)
    assert 'id="slip"' in text and 'id="slip-warning"' not in text
    cell = {"status": "ok", "summary": {}, "benchmark": {"sweep": [{"prefix_cache": CACHE}], "workload": WORKLOAD}}
    assert analysis.result_key(cell, "prefix_cache") == CACHE and analysis.result_key(cell, "workload") == WORKLOAD
    assert analysis.result_key(cell, "per_turn") is None


def test_different_workloads_are_said_not_to_compare():
    report = matrix(["base"], ["h1"], {"base": [47.3]})
    report["workloads"] = [WORKLOAD, dict(WORKLOAD, sha256="ff" * 32)]
    assert "ran 2 different workloads" in page.render_page(report)


@pytest.mark.parametrize("top, ticks", [(57.6, [0, 20, 40, 60]), (47.3, [0, 10, 20, 30, 40, 50]), (0.9, [0, 0.2, 0.4, 0.6, 0.8, 1.0]), (0, [0, 1]),
                                        (1000, [0, 200, 400, 600, 800, 1000])])
def test_nice_ticks(top, ticks):
    assert chart_svg.nice_ticks(top) == pytest.approx(ticks)


def test_a_bar_chart_escapes_its_labels_and_draws_whiskers_only_when_given():
    svg = chart_svg.bar_chart([(EVIL, [chart_svg.Bar("s<1>", 10.0, 9.0, 11.0), chart_svg.Bar("s2", None)])], "tok/s", EVIL, "c\"x")
    assert "<script>" not in svg and "s<1>" not in svg and 'id="c&quot;x"' in svg
    assert svg.count('class="whisker"') == 1 and svg.count('class="bar"') == 1 and svg.count(">n/a<") == 1
    assert svg.count('<g class="legend"') == 2


def test_a_synthetic_workload_is_said_to_be_generated_not_a_missing_file():
    shown = page.workload_section([{"kind": "synthetic", "requests": 32}])
    assert "prompts generated by the client (no file)" in shown and "N/A" not in shown.split("</p>", 1)[0], shown
    from_file = page.workload_section([WORKLOAD])
    assert "file <code>/data/&lt;evil&gt;.jsonl</code>" in from_file and "<evil>" not in from_file and WORKLOAD["sha256"][:12] in from_file
