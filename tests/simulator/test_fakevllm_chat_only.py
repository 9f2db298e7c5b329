# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A chat-only fake vLLM (GPUOPS_SIM_CHAT_ONLY): /v1/completions is not there, /v1/chat/completions works."""

from __future__ import annotations

import json

from gpusim_helpers import FakeServers, wait_for


def test_completions_answer_404_and_chat_answers(servers: FakeServers) -> None:
    server = servers.start(gpus="0", model="org/chat", env={"GPUOPS_SIM_CHAT_ONLY": "1", "GPUOPS_SIM_TTFT_MS": "1",
                                                            "GPUOPS_SIM_TOKENS_PER_S": "2000"})
    server.wait_ready()
    assert server.get_json("/sim/pace")["chat_only"] is True
    for body in ({"prompt": "one two three", "max_tokens": 3}, {"prompt": "x", "max_tokens": 2, "stream": True}):
        status, data = server.request("POST", "/v1/completions", body)
        assert status == 404
        error = json.loads(data)["error"]
        assert error["type"] == "NotFoundError" and error["code"] == 404 and "/v1/chat/completions" in error["message"]
    assert server.request("GET", "/v1/completions")[0] == 404  # no such route, whatever the method

    answer = server.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "one two three"}],
                                                       "max_tokens": 3, "ignore_eos": True})
    assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] == 3
    result = server.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "four five"}],
                                                    "max_tokens": 2, "ignore_eos": True})
    assert result.status == 200 and result.done and len(result.texts()) == 2
    # the refused requests took no place in the server's record, nor in its counters
    assert wait_for(lambda: len(server.sent()) == 2, timeout=10)
    assert [record["endpoint"] for record in server.sent()] == ["chat", "chat"]
    assert server.counter("vllm:prompt_tokens_total", "org/chat") == 5


def test_a_server_that_is_not_chat_only_serves_completions(servers: FakeServers) -> None:
    server = servers.start(gpus="1", env={"GPUOPS_SIM_CHAT_ONLY": "0", "GPUOPS_SIM_TTFT_MS": "1"})
    server.wait_ready()
    assert server.get_json("/sim/pace")["chat_only"] is False
    status, data = server.request("POST", "/v1/completions", {"prompt": "one two", "max_tokens": 2})
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2
