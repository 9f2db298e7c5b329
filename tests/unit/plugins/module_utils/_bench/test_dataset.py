# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A dataset workload (_bench/dataset): JSONL prompts and messages, ShareGPT, bad lines named, the prompt-length filter,
the seed's order and request bodies."""

from __future__ import annotations

import hashlib
import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.dataset import Dataset
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import WorkloadError, WorkloadSpec


def dataset(tmp_path, text, name="d.jsonl", seed=0, output_len=50, **options):
    path = tmp_path / name
    path.write_text(text)
    return Dataset(WorkloadSpec(kind="dataset", file=str(path), **options), seed, output_len)


def lines(*objects):
    return "".join(json.dumps(obj) + "\n" for obj in objects)


def test_jsonl_prompts_and_messages(tmp_path):
    text = lines({"prompt": "one two three", "output_len": 7},
                 {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]}) + "\n"
    data = dataset(tmp_path, text)
    assert data.sha256 == hashlib.sha256(text.encode()).hexdigest()
    entries = sorted(data.pool, key=lambda entry: entry.line)
    assert [(e.prompt_words, e.output_len, e.line) for e in entries] == [(3, 7, 1), (4, None, 2)]
    prompt, messages = entries
    chat = json.loads(data.body(prompt, "chat", "m", True))
    assert chat["messages"] == [{"role": "user", "content": "one two three"}] and chat["max_tokens"] == 7
    assert json.loads(data.body(messages, "chat", "m", True))["messages"][1] == {"role": "user", "content": "hello there"}
    completion = json.loads(data.body(messages, "completions", "m", False))
    assert completion["prompt"] == "be brief\n\nhello there" and completion["max_tokens"] == 50 and "ignore_eos" not in completion


def test_sharegpt_list_and_lines(tmp_path):
    conversations = [
        {"conversations": [{"from": "human", "value": "tell me a story"}, {"from": "gpt", "value": "once upon a time"}]},
        {"conversations": [{"from": "gpt", "value": "no human turn: skipped"}]},
        {"conversations": [{"from": "system", "value": "x"}, {"from": "human", "value": "hi"},
                           {"from": "human", "value": "again"}, {"from": "gpt", "value": "a b"}], "id": "3"},
        {"conversations": [{"from": "human", "value": "no answer"}]},
    ]
    text = json.dumps(conversations, indent=1)
    data = dataset(tmp_path, text, name="sharegpt.json")
    got = sorted((entry.prompt, entry.output_len) for entry in data.pool)
    assert got == [("hi", 2), ("no answer", None), ("tell me a story", 4)]
    starts = [number for number, line in enumerate(text.splitlines(), 1) if line == " {"]  # where each entry begins
    assert len(starts) == 4 and sorted(entry.line for entry in data.pool) == [starts[0], starts[2], starts[3]]
    # a ShareGPT entry as a JSON line, beside plain prompts
    mixed = dataset(tmp_path, lines(conversations[0], {"prompt": "p q"}))
    assert sorted(entry.prompt for entry in mixed.pool) == ["p q", "tell me a story"]


def test_sharegpt_entry_lines_are_named(tmp_path):
    text = '[\n  {"conversations": [{"from": "human", "value": "ok"}]},\n  {"conversations": "broken"}\n]\n'
    with pytest.raises(WorkloadError, match=r"line 3: not a ShareGPT entry"):
        dataset(tmp_path, text, name="s.json")
    with pytest.raises(WorkloadError, match=r"line 2: not JSON"):
        dataset(tmp_path, '[\n {"conversations": [}\n]', name="s.json")
    with pytest.raises(WorkloadError, match=r"line 1: a ShareGPT file is a JSON list"):
        dataset(tmp_path, '{"prompt": "x"}', name="s.json", format="sharegpt")


@pytest.mark.parametrize("text, message", [
    ('{"prompt": "ok"}\n{"prompt": "broken\n', "line 2: not JSON"),
    ('{"prompt": "ok"}\n\n[1, 2]\n', "line 3: not a JSON object but list"),
    ('{"prompt": ""}\n', "line 1: prompt \"\" is not a non-empty string"),
    ('{"prompt": "a", "messages": []}\n', "line 1: give either \"prompt\" (a string) or \"messages\""),
    ('{"text": "a"}\n', "line 1: give either"),
    ('{"prompt": "a", "output_len": 0}\n', "line 1: output_len 0 is not a whole number of tokens"),
    ('{"prompt": "a", "output_len": "5"}\n', "line 1: output_len '5' is not a whole number"),
    ('{"messages": [{"role": "user"}]}\n', "line 1: message 1 is not {\"role\""),
    ('{"messages": [{"role": "robot", "content": "x"}]}\n', "line 1: message 1 is not"),
    ('{"conversations": [{"from": "human"}]}\n', "line 1: conversation turn 1 is not"),
    ('\n\n', "holds no request"),
])
def test_bad_lines_are_named(tmp_path, text, message):
    with pytest.raises(WorkloadError) as caught:
        dataset(tmp_path, text)
    assert message in str(caught.value) and str(tmp_path / "d.jsonl") in str(caught.value)


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "\xff"}\n')
    with pytest.raises(WorkloadError, match=r"line 2: not UTF-8"):
        Dataset(WorkloadSpec(kind="dataset", file=str(path)), 0, 5)


def test_filter_by_prompt_length(tmp_path):
    text = lines(*({"prompt": " ".join(["w"] * n)} for n in (1, 5, 10, 20)))
    data = dataset(tmp_path, text, min_prompt_len=5, max_prompt_len=10)
    assert sorted(entry.prompt_words for entry in data.pool) == [5, 10]
    with pytest.raises(WorkloadError, match=r"none of its 4 requests has a prompt of 30 to any number of words.*1 to 20"):
        dataset(tmp_path, text, min_prompt_len=30)


def test_order_from_the_seed_the_same_every_time(tmp_path):
    text = lines(*({"prompt": "prompt %d" % n, "output_len": n + 1} for n in range(20)))
    first = dataset(tmp_path, text, seed=3)
    again = dataset(tmp_path, text, seed=3)
    other = dataset(tmp_path, text, seed=4)
    order = [first.entry(index).prompt for index in range(20)]
    assert order == [again.entry(index).prompt for index in range(20)]
    assert order != [other.entry(index).prompt for index in range(20)]
    assert sorted(order) == sorted("prompt %d" % n for n in range(20))  # each entry once before any repeats
    assert [first.entry(index).prompt for index in range(20, 25)] == order[:5]  # then the order again
    assert first.warmup_entry(0).prompt == order[-1] and first.warmup_entry(1).prompt == order[-2]
    summary = first.summary(4)
    assert summary["requests"] == 4 and summary["kind"] == "dataset" and summary["file"] == str(tmp_path / "d.jsonl")
    assert summary["prompt_len"] == {"min": 2, "p50": 2, "p90": 2, "max": 2}
    outputs = sorted(first.entry(index).output_len for index in range(4))
    assert summary["output_len"]["min"] == outputs[0] and summary["output_len"]["max"] == outputs[-1]
