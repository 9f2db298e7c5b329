# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ready step's generation check (_server/generation.py): one short completion must come back with tokens in
bounded time; a 5xx, an error body, no token or a timeout fails it, naming what the server answered, the key masked."""

from __future__ import annotations

import json
import socket
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import (
    ANSWER_SHOWN_CHARS, GENERATE_MAX_TOKENS, check_generation, judge, reading_generates, request_body, shown_answer)
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import Reply
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer

DEAD = json.dumps({"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                             "type": "EngineDeadError", "param": None, "code": 500}})
GOOD = json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": " a b c d"}],
                   "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}})


def test_a_completion_with_tokens_passes():
    result = judge(Reply(200, GOOD, None), 0.2, 60)
    assert result.ok and result.tokens == 4 and result.status == 200 and not result.problem and not result.answer


def test_without_usage_the_words_of_the_text_count():
    body = json.dumps({"choices": [{"text": " one two"}]})
    assert judge(Reply(200, body, None), 0.1, 60).tokens == 2
    chat = json.dumps({"choices": [{"message": {"role": "assistant", "content": "one"}}]})
    assert judge(Reply(200, chat, None), 0.1, 60).ok


@pytest.mark.parametrize("reply, problem", [
    (Reply(500, DEAD, None), "HTTP 500"),
    (Reply(503, "", None), "HTTP 503"),
    (Reply(200, json.dumps({"error": {"message": "overloaded", "type": "InternalServerError"}}), None),
     "HTTP 200 with an error body"),
    (Reply(200, json.dumps({"object": "error", "message": "engine died"}), None), "HTTP 200 with an error body"),
    (Reply(200, json.dumps({"choices": [{"text": ""}], "usage": {"completion_tokens": 0}}), None),
     "HTTP 200 without a generated token"),
    (Reply(200, json.dumps({"choices": []}), None), "HTTP 200 without a generated token"),
    (Reply(200, "<html>proxy</html>", None), "HTTP 200 without a JSON completion"),
    (Reply(None, "", "timed out after 5 s"), "no answer (timed out after 5 s)"),
    (Reply(None, "", "connection refused"), "no answer (connection refused)"),
])
def test_every_other_answer_fails_with_what_came(reply, problem):
    result = judge(reply, 0.1, 60)
    assert not result.ok and result.tokens == 0 and result.problem == problem
    assert result.answer == " ".join(reply.body.split())


def test_an_answer_later_than_allowed_fails_even_with_tokens():
    result = judge(Reply(200, GOOD, None), 7.5, 5)
    assert not result.ok and result.problem == "HTTP 200, later than allowed"


def test_the_message_names_the_check_the_answer_and_masks_the_key():
    body = json.dumps({"error": {"message": "EngineDeadError: key sk-secret-1 seen", "type": "EngineDeadError"}})
    result = judge(Reply(500, body, None), 0.05, 30, ["sk-secret-1", None])
    message = result.describe("http://127.0.0.1:8000", 30)
    assert message.startswith("generation check failed: a completion of %d tokens from http://127.0.0.1:8000/v1/completions"
                              " (allowed 30 s) got HTTP 500 after 0.1 s; the server answered: " % GENERATE_MAX_TOKENS)
    assert "EngineDeadError" in message and "sk-secret-1" not in message and "********" in message


def test_a_long_answer_is_trimmed_on_one_line():
    shown = shown_answer("x\n" * 2000)
    assert "\n" not in shown and shown.startswith("x x") and shown.endswith("... (3999 characters)")
    assert len(shown) < ANSWER_SHOWN_CHARS + 30


def test_the_request_asks_for_a_few_tokens_of_the_model():
    body = request_body("org/m")
    assert body["model"] == "org/m" and body["max_tokens"] == GENERATE_MAX_TOKENS <= 8 and body["stream"] is False
    assert body["ignore_eos"] is True  # a model that would stop at once still returns tokens
    assert "model" not in request_body(None)


@pytest.fixture
def serve():
    started = []

    def start(answer):
        started.append(LoopbackServer(answer))
        return started[-1]
    yield start
    for server in started:
        server.close()


def test_check_generation_sends_the_completion_with_the_key(serve):
    server = serve(lambda handler, raw: (200, GOOD.encode()))
    result = check_generation(server.url, "org/m", 10, api_key="k1")
    assert result.ok and result.tokens == 4
    (method, path, headers, raw), = server.seen
    body = json.loads(raw)
    assert method == "POST" and path == "/v1/completions" and headers["Authorization"] == "Bearer k1"
    assert headers["Content-Type"] == "application/json" and body == request_body("org/m")
    check_generation(server.url, None, 10)
    assert "Authorization" not in server.seen[1][2]


def test_check_generation_of_a_dead_engine(serve):
    server = serve(lambda handler, raw: (500, DEAD.encode()))
    result = check_generation(server.url, "org/m", 10)
    assert not result.ok and result.status == 500 and "EngineDeadError" in result.answer


def test_check_generation_of_a_server_that_never_answers_is_bounded():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)  # accepts into the backlog, never reads
        start = time.monotonic()
        result = check_generation("http://127.0.0.1:%d" % sock.getsockname()[1], "org/m", 0.5)
        took = time.monotonic() - start
    assert not result.ok and result.status is None and result.problem.startswith("no answer (timed out")
    assert took < 3


def test_as_result_carries_the_problem_and_answer_only_on_failure():
    assert judge(Reply(200, GOOD, None), 0.2, 60).as_result() == {"ok": True, "tokens": 4, "elapsed_s": 0.2, "status": 200}
    failed = judge(Reply(500, DEAD, None), 0.01, 60).as_result()
    assert failed["ok"] is False and failed["status"] == 500 and failed["problem"] == "HTTP 500"
    assert "EngineDeadError" in failed["answer"]


def test_a_reading_asks_only_when_given_a_timeout(serve):
    server = serve(lambda handler, raw: (500, DEAD.encode()))
    assert reading_generates(None) is None and reading_generates({}) is None
    assert reading_generates({"url": server.url, "model": "m", "timeout": 0}) is None  # 0 skips the check
    assert not server.seen
    result = reading_generates({"url": server.url + "/", "model": "m", "api_key": "k2", "timeout": 5})
    assert result is not None and not result.ok and result.status == 500
    (method, path, headers, raw), = server.seen
    assert method == "POST" and path == "/v1/completions" and headers["Authorization"] == "Bearer k2" and json.loads(raw) == request_body("m")
