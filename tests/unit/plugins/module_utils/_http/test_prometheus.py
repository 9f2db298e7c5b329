# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one Prometheus text parser: sample lines, a whole exposition, a metric's total per model."""

from __future__ import annotations

import math

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._http import prometheus as prom

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_running_total 99
vllm:generation_tokens_total{model_name="m"} 1.5e3
"""

METRICS_TEXT = """# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m1"} 1200.0
vllm:generation_tokens_total{engine="1",model_name="m1"} 34.0
vllm:generation_tokens_total{engine="0",model_name="other \\"quoted\\""} 99.0
vllm:generation_tokens_total_created{model_name="m1"} 1.7e9
vllm:prompt_tokens_total{model_name="m1"} 5.0
"""


def test_parse_line_labels_escapes_special_values_and_timestamps():
    assert prom.parse_line("# TYPE x counter") is None and prom.parse_line("   ") is None
    assert prom.parse_line("up 1") == ("up", {}, 1.0)
    name, labels, value = prom.parse_line(r'm{a="x,y}",b="q\"uote",c="back\\slash",d="new\nline"} 2.5 1712345678000')
    assert name == "m" and value == 2.5
    assert labels == {"a": "x,y}", "b": 'q"uote', "c": "back\\slash", "d": "new\nline"}
    assert prom.parse_line('m{le="+Inf",} +Inf')[2] == math.inf  # a trailing comma is allowed
    assert math.isnan(prom.parse_line("m NaN")[2])
    assert prom.parse_line("m -Inf")[2] == -math.inf
    for bad in ('m{a=x} 1', 'm{a="x} 1', "m", "m{} one"):
        with pytest.raises(prom.ParseError):
            prom.parse_line(bad)


def test_parse_skips_odd_lines_and_filters_by_name():
    text = 'a_total 1\nthis is not a sample\nb{x="1"} 2\nb{x="2"} 3\n'
    assert prom.parse(text) == {"a_total": [({}, 1.0)], "b": [({"x": "1"}, 2.0), ({"x": "2"}, 3.0)]}
    assert prom.parse(text, ["b"]) == {"b": [({"x": "1"}, 2.0), ({"x": "2"}, 3.0)]}


def test_total_adds_label_sets_and_ignores_other_names():
    assert prom.total(METRICS, "vllm:num_requests_running") == 5.0
    assert prom.total(METRICS, "vllm:generation_tokens_total") == 1500.0
    assert prom.total(METRICS, "vllm:num_requests_waiting") is None


def test_total_of_one_model():
    assert prom.total(METRICS_TEXT, "vllm:generation_tokens_total", "m1") == 1234.0
    # the label's escaped quotes are decoded: the model is named as /v1/models names it
    assert prom.total(METRICS_TEXT, "vllm:generation_tokens_total", 'other "quoted"') == 99.0
    assert prom.total(METRICS_TEXT, "vllm:generation_tokens_total") == 1333.0
    assert prom.total(METRICS_TEXT, "vllm:num_requests_running", "m1") is None
    # a sample without a model_name label counts for any model
    assert prom.total("vllm:generation_tokens_total 7\n", "vllm:generation_tokens_total", "m1") == 7.0


def test_a_label_value_with_a_closing_brace_is_one_sample():
    text = 'vllm:num_requests_running{model_name="a}b"} 4\nvllm:num_requests_running{model_name="c"} 1\n'
    assert prom.total(text, "vllm:num_requests_running", "a}b") == 4.0
    assert prom.total(text, "vllm:num_requests_running") == 5.0


def test_family_total_takes_the_first_name_offered():
    families = prom.parse('new{model_name="m"} 0.5\nold{model_name="m"} 0.9\nold{model_name="n"} 0.1\n')
    assert prom.family_total(families, ("absent", "old", "new"), "m") == 0.9
    assert prom.family_total(families, "old") == 1.0
    assert prom.family_total(families, ("absent",)) is None
