# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Synthetic prompts and request bodies for the benchmark.

A prompt is `input_len` words drawn at random from short, common English words (most are a single token in the
usual tokenizers, so the server's prompt_tokens is close to input_len). The draw depends on the seed, the repeat
and the request, so no two requests of a run, and no two repeats, share a prefix the server could cache.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import random
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sse import CHAT

WORDS = (
    "the of and to in is it you that he was for on are as with his they at be this have from or one had by"
    " word but not what all were we when your can said there use an each which she do how their if will up"
    " other about out many then them these so some her would make like him into time has look two more write"
    " go see number no way could people my than first water been call who oil its now find long down day did"
    " get come made may part over new sound take only little work know place year live me back give most very"
    " after thing our just name good sentence man think say great where help through much before line right"
    " too mean old any same tell boy follow came want show also around form three small set put end does"
    " another well large must big even such because turn here why ask went men read need land different home"
    " us move try kind hand picture again change off play spell air away animal house point page letter"
).split()


def prompt_words(input_len: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _word in range(input_len))


def request_body(endpoint: str, model: str, prompt: str, output_len: int, ignore_eos: bool,
                 messages: t.Optional[t.Sequence[t.Mapping[str, t.Any]]] = None) -> bytes:
    """The JSON body of one streaming request; usage is asked for so tokens are counted by the server. With
    `messages` (a conversation), the chat endpoint gets them as they are, the completions endpoint their transcript."""
    body: t.Dict[str, t.Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True}}
    if endpoint == CHAT:
        body["messages"] = list(messages) if messages is not None else [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = output_len
        body["max_tokens"] = output_len  # older servers read only this one
    else:
        body["prompt"] = transcript(messages) if messages is not None else prompt
        body["max_tokens"] = output_len
    if ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def request_bodies(endpoint: str, model: str, count: int, input_len: int, output_len: int, ignore_eos: bool,
                   seed: int, phase: str) -> t.List[bytes]:
    """`count` bodies for one phase of a benchmark ('warmup', 'repeat1', ...), reproducible from the seed."""
    rng = random.Random("%d/%s" % (seed, phase))
    return [request_body(endpoint, model, prompt_words(input_len, rng), output_len, ignore_eos) for _index in range(count)]


def transcript(messages: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """A conversation as one completions prompt: the messages' contents, in order, a blank line between them."""
    return "\n\n".join(str(message.get("content") or "") for message in messages)
