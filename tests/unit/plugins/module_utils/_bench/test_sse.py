# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SSE splitter and the OpenAI stream interpreter (_bench/sse), fed byte by byte and in odd pieces."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sse import MAX_EVENT_BYTES, SseError, SseEvent, SseSplitter, StreamInterpreter


# ----------------------------------------------------------------------------- SSE splitter

STREAM = (b'data: {"n":1}\n\n'
          b': keep-alive ping\n\n'
          b'event: error\ndata: {"message":"x"}\n\n'
          b'data: line one\ndata: line two\n\n'
          b'id: 7\nretry: 100\n\n'
          b'data: [DONE]\n\n')
EXPECTED = [("", b'{"n":1}'), ("error", b'{"message":"x"}'), ("", b"line one\nline two"), ("", b"[DONE]")]


def split_all(data: bytes, size: int) -> list:
    splitter = SseSplitter()
    events = []
    for i in range(0, len(data), size):
        events += splitter.feed(data[i:i + size])
    assert splitter.pending == b""
    return [(e.event, e.data) for e in events]


@pytest.mark.parametrize("size", [1, 2, 5, 13, 1000])
def test_events_split_anywhere(size):
    assert split_all(STREAM, size) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 1000])
@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_ends(size, newline):
    assert split_all(STREAM.replace(b"\n", newline), size) == EXPECTED


def test_data_without_space_and_unfinished_event():
    splitter = SseSplitter()
    assert [(e.event, e.data) for e in splitter.feed(b"data:{}\n\ndata: {\"partial")] == [("", b"{}")]
    assert splitter.pending == b'data: {"partial'


def test_oversized_event_is_refused():
    with pytest.raises(SseError):
        SseSplitter().feed(b"data: " + b"x" * (MAX_EVENT_BYTES + 1))


# ----------------------------------------------------------------------------- OpenAI stream interpreter

def ev(obj) -> SseEvent:
    return SseEvent("", obj if isinstance(obj, bytes) else json.dumps(obj).encode())


def completion(text, finish=None):
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def chat(delta, finish=None):
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def usage(prompt, completion_tokens):
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                                     "total_tokens": prompt + completion_tokens}}


def test_completions_stream_times_and_usage():
    s = StreamInterpreter("completions")
    s.on_event(ev(completion(" a b c d")), 10.0)   # 4 tokens packed in one chunk
    s.on_event(ev(completion(" e")), 10.5)
    s.on_event(ev(completion("", "length")), 10.6)  # closing chunk without text: no token
    s.on_event(ev(usage(12, 5)), 10.7)
    s.on_event(ev(b"[DONE]"), 10.8)
    assert s.done and s.error is None
    assert s.first_ts == 10.0 and s.last_ts == 10.5 and s.itl == [0.5]
    assert s.content_chunks == 2 and s.completion_tokens == 5 and s.prompt_tokens == 12
    assert s.finish_reason == "length"


def test_completions_special_token_with_empty_text_counts():
    s = StreamInterpreter("completions")
    s.on_event(ev(completion("")), 1.0)
    s.on_event(ev(completion("x", "length")), 2.0)
    assert s.first_ts == 1.0 and s.last_ts == 2.0 and s.content_chunks == 2


def test_chat_role_only_first_chunk_is_not_a_token():
    s = StreamInterpreter("chat")
    s.on_event(ev(chat({"role": "assistant", "content": ""})), 1.0)
    s.on_event(ev(chat({"role": "assistant"})), 1.1)
    assert s.first_ts is None and s.content_chunks == 0
    s.on_event(ev(chat({"content": "Hello"})), 1.25)
    s.on_event(ev(chat({"content": " world"}, "length")), 1.5)
    s.on_event(ev(chat({}, "length")), 1.6)
    assert s.first_ts == 1.25 and s.last_ts == 1.5 and s.itl == [0.25] and s.content_chunks == 2


def test_chat_reasoning_counts_as_content():
    s = StreamInterpreter("chat")
    s.on_event(ev(chat({"reasoning_content": "hmm"})), 3.0)
    assert s.first_ts == 3.0


@pytest.mark.parametrize("event, message", [
    (ev({"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}}), "CUDA out of memory (500)"),
    (ev({"object": "error", "message": "bad things", "type": "BadRequestError"}), "bad things (BadRequestError)"),
    (SseEvent("error", b'{"message": "overloaded"}'), "overloaded"),
    (SseEvent("error", b"plain text"), "plain text"),
    (ev(b"{not json"), "malformed event"),
    (ev(b"[1, 2]"), "not a JSON object"),
])
def test_error_events(event, message):
    s = StreamInterpreter("completions")
    s.on_event(ev(completion("a")), 1.0)
    s.on_event(event, 2.0)
    assert s.error is not None and message in s.error


def test_usage_on_every_chunk_keeps_the_last():
    s = StreamInterpreter("completions")
    for i in range(1, 4):
        obj = completion("t")
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": i}
        s.on_event(ev(obj), float(i))
    assert s.completion_tokens == 3 and s.content_chunks == 3 and s.itl == [1.0, 1.0]


def test_kept_text_and_cached_tokens():
    kept = StreamInterpreter("chat", keep_text=True)
    plain = StreamInterpreter("completions")
    assert kept.text == "" and plain.text == ""
    for n, piece in enumerate((" a", " b c")):
        kept.on_event(SseEvent("", json.dumps({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}).encode()), n)
        plain.on_event(SseEvent("", json.dumps({"choices": [{"index": 0, "text": piece, "finish_reason": None}]}).encode()), n)
    usage = {"prompt_tokens": 40, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 32}}
    for stream in (kept, plain):
        stream.on_event(SseEvent("", json.dumps({"choices": [], "usage": usage}).encode()), 3)
        assert stream.cached_tokens == 32 and stream.prompt_tokens == 40
    assert kept.text == " a b c" and plain.text == "" and plain.pieces is None  # not kept unless asked
    bare = StreamInterpreter("completions", keep_text=True)
    bare.on_event(SseEvent("", json.dumps({"choices": [{"index": 0, "text": " x", "finish_reason": None}],
                                          "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()), 0)
    assert bare.text == " x" and bare.cached_tokens is None
