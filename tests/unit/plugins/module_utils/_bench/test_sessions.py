# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sessions workload (_bench/sessions): each turn the conversation so far plus a new user message, and the
per-turn figures."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_body
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sessions import Sessions, per_turn
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import WorkloadSpec


def sessions(seed=0):
    return Sessions(WorkloadSpec(kind="sessions", sessions=2, turns=3), seed, 5, 4)


def test_each_turn_extends_the_one_before():
    talk = sessions().conversations("repeat1")
    first = json.loads(talk.body(0, [], "chat", "m", True))["messages"]
    third = json.loads(talk.body(0, [" a b", " c"], "chat", "m", True))["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert third[0] == first[0] and third[1]["content"] == " a b" and third[3]["content"] == " c"
    assert len(third[4]["content"].split()) == 5 and len({m["content"] for m in third[::2]}) == 3
    prompt = json.loads(talk.body(0, [" a b"], "completions", "m", True))["prompt"]
    assert prompt.startswith(first[0]["content"] + "\n\n a b\n\n") and json.loads(talk.body(0, [], "completions", "m", True))["max_tokens"] == 4
    assert talk.prompt_words == [5, 5 + 2 + 5 + 1 + 5, 5 + 2 + 5, 5]
    # sessions differ from each other, phases and seeds from each other; the same ones are the same
    assert talk.user_message(1, 0) != talk.user_message(0, 0)
    assert sessions().conversations("repeat2").user_message(0, 0) != talk.user_message(0, 0)
    assert sessions(seed=1).conversations("repeat1").user_message(0, 0) != talk.user_message(0, 0)
    assert sessions().conversations("repeat1").user_message(0, 2) == talk.user_message(0, 2)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("ignore_eos", [True, False])
def test_a_conversation_makes_the_bytes_request_body_makes_of_the_whole_conversation(endpoint, ignore_eos):
    talk = sessions().conversations("repeat1")
    model = 'org/"messages":["prompt":"'  # the places the body is cut, in the model's name
    answers = [' say "hi"\n\tnow\\', "", " caf\u00e9 \U0001f600 </s>", " end"]
    conversation = talk.conversation(1, endpoint, model, ignore_eos)
    messages = []
    for turn in range(len(answers) + 1):
        if turn:
            messages.append({"role": "assistant", "content": answers[turn - 1]})
        messages.append({"role": "user", "content": talk.user_message(1, turn)})
        made = conversation.body(answers[turn - 1] if turn else None)
        assert made == request_body(endpoint, model, "", 4, ignore_eos, messages=messages)
        assert talk.body(1, answers[:turn], endpoint, model, ignore_eos) == made
    assert talk.prompt_words[::2] == [5, 13, 18, 26, 32]  # user messages of 5 words, answers of 3, 0, 3 and 1


def test_a_prepared_turn_draws_nothing_when_its_answer_comes(monkeypatch):
    talk = sessions().conversations("repeat1")
    conversation = talk.conversation(0, "chat", "m", True)
    first = talk.user_message(0, 0), talk.user_message(0, 1)
    conversation.prepare()
    conversation.prepare()  # prepared once
    drawn = []
    monkeypatch.setattr(talk, "user_message", lambda session, turn: drawn.append((session, turn)) or first[turn])
    assert json.loads(conversation.body())["messages"] == [{"role": "user", "content": first[0]}]
    conversation.prepare()  # what the client does once the first turn has been sent
    assert drawn == [(0, 1)]
    monkeypatch.setattr(talk, "user_message", lambda session, turn: pytest.fail("drawn at the end of a turn"))
    second = json.loads(conversation.body(" a b"))["messages"]
    assert second == [{"role": "user", "content": first[0]}, {"role": "assistant", "content": " a b"},
                      {"role": "user", "content": first[1]}]


def test_per_turn_figures():
    outcomes = []
    for index, (ttft, cached, success) in enumerate([(0.2, None, True), (0.05, 16, True), (0.04, 32, True),
                                                     (0.3, None, True), (0.06, 16, True), (0.0, None, False)]):
        outcome = Outcome(index)
        outcome.ttft, outcome.cached_tokens, outcome.success = ttft, cached, success
        outcomes.append(outcome)
    turns = per_turn(outcomes, 3)
    assert [(turn["turn"], turn["requests"], turn["cached_tokens"]) for turn in turns] == [(1, 2, 0), (2, 2, 32), (3, 1, 32)]
    assert turns[0]["ttft_ms"]["mean"] == pytest.approx(250.0) and turns[0]["ttft_ms"]["p50"] == pytest.approx(250.0)
    assert turns[2]["ttft_ms"] == pytest.approx({"mean": 40.0, "p50": 40.0, "p90": 40.0, "p99": 40.0})
    assert per_turn(outcomes[:1], 2)[1] == {"turn": 2, "requests": 0, "ttft_ms": None, "cached_tokens": None}
    # a server that never reports cached tokens: null, not 0
    assert [turn["cached_tokens"] for turn in per_turn(outcomes[3:4], 3)] == [None, None, None]
    summary = sessions().summary()
    assert summary["requests"] == 6 and summary["prompt_len"] is None and summary["output_len"]["max"] == 4
