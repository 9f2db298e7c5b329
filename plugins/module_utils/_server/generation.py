# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ready step's generation check: one short completion, which must come back with tokens in bounded time.

vLLM's /health and /v1/models are answered by the API server process, which outlives a dead or hung engine core: a
server can list its model and still answer every completion with HTTP 500 (EngineDeadError) or never at all. Only a
request that generates proves the engine works. The request is small (GENERATE_MAX_TOKENS tokens, EOS ignored so that
a model which would stop at once still returns them) and not streamed: its whole answer is judged at once.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _http, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import MASK
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import Reply, http_post_json

GENERATE_PATH = "/v1/completions"
GENERATE_PROMPT = "The GPU server is"
GENERATE_MAX_TOKENS = 4
ANSWER_SHOWN_CHARS = 300  # of the server's answer, in a failure message
GENERATE_TIMEOUT_MAX_S = 3600

# The options of a generation check asked for by a reading (vllm_process state=status, vllm_lock's status): the
# server's base URL, the model, the key and the seconds allowed (0 skips the check). One spec for both modules.
GENERATE_OPTIONS: t.Dict[str, t.Dict[str, t.Any]] = {
    "url": {"type": "str", "required": True},
    "model": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "timeout": {"type": "float", "default": 60},
}


class GenerationResult(t.NamedTuple):
    ok: bool
    tokens: int  # generated tokens, as the server counted them (usage), else the words of the text
    elapsed_s: float
    status: t.Optional[int]  # the HTTP status; None when no answer came
    problem: str  # why it failed, in a few words ('' when ok)
    answer: str  # the server's answer, trimmed, secrets masked ('' when ok)

    def as_result(self) -> t.Dict[str, t.Any]:
        """The check as a module returns it: ok, tokens, elapsed_s, status, and on failure problem and answer."""
        result: t.Dict[str, t.Any] = {"ok": self.ok, "tokens": self.tokens, "elapsed_s": self.elapsed_s, "status": self.status}
        if not self.ok:
            result.update(problem=self.problem, answer=self.answer)
        return result

    def describe(self, url: str, timeout: float) -> str:
        """One line for a failure message, naming the check."""
        return "generation check failed: a completion of %d tokens from %s%s (allowed %g s) got %s after %.1f s%s" % (
            GENERATE_MAX_TOKENS, url, GENERATE_PATH, timeout, self.problem, self.elapsed_s,
            ("; the server answered: " + self.answer) if self.answer else "")


def request_body(model: t.Optional[str]) -> t.Dict[str, t.Any]:
    """The completion asked for: a few tokens, deterministic, not streamed."""
    body: t.Dict[str, t.Any] = {"prompt": GENERATE_PROMPT, "max_tokens": GENERATE_MAX_TOKENS, "temperature": 0,
                                "ignore_eos": True, "stream": False}
    if model:
        body["model"] = model
    return body


def shown_answer(text: str, secrets: t.Iterable[t.Optional[str]] = ()) -> str:
    """The server's answer as a message may show it: on one line, every secret replaced by MASK, at most
    ANSWER_SHOWN_CHARS characters."""
    shown = " ".join(text.split())
    for secret in secrets:
        if secret:
            shown = shown.replace(secret, MASK)
    if len(shown) > ANSWER_SHOWN_CHARS:
        shown = shown[:ANSWER_SHOWN_CHARS] + "... (%d characters)" % len(shown)
    return shown


def _error_of(data: t.Any) -> t.Optional[str]:
    """The error an OpenAI-style body carries ({"error": {...}} or {"error": "..."}, or vLLM's {"object": "error"}),
    else None."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict):
        return " ".join(str(error.get(key)) for key in ("type", "message") if error.get(key)) or "an error body"
    if error:
        return str(error)
    if data.get("object") == "error":
        return str(data.get("message") or data.get("type") or "an error body")
    return None


def generated_tokens(data: t.Any) -> int:
    """The tokens a completion body says it generated: usage.completion_tokens, else the words of its text."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int) and not isinstance(usage.get("completion_tokens"), bool):
        return max(0, usage["completion_tokens"])
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list):
        return 0
    words = 0
    for choice in choices:
        if isinstance(choice, dict):
            text = choice.get("text")
            if text is None and isinstance(choice.get("message"), dict):
                text = choice["message"].get("content")
            words += len(str(text or "").split())
    return words


def judge(reply: Reply, elapsed: float, timeout: float, secrets: t.Iterable[t.Optional[str]] = ()) -> GenerationResult:
    """Whether one completion's answer proves that the server generates: HTTP 200, a JSON body without an error and
    with at least one token, within ``timeout`` seconds. Anything else fails, with what the server answered."""
    secrets = list(secrets)
    elapsed = round(elapsed, 3)

    def failed(problem: str, body: str = "") -> GenerationResult:
        return GenerationResult(False, 0, elapsed, reply.status, problem, shown_answer(body, secrets))

    if reply.status is None:
        return failed("no answer (%s)" % (reply.error or "none"))
    if elapsed > timeout:
        return failed("HTTP %d, later than allowed" % reply.status, reply.body)
    try:
        data = json.loads(reply.body) if reply.body.strip() else None
    except ValueError:
        data = None
    error = _error_of(data)
    if reply.status != 200:
        return failed("HTTP %d" % reply.status, reply.body)
    if error is not None:
        return failed("HTTP 200 with an error body", reply.body)
    if not isinstance(data, dict):
        return failed("HTTP 200 without a JSON completion", reply.body)
    tokens = generated_tokens(data)
    if tokens < 1:
        return failed("HTTP 200 without a generated token", reply.body)
    return GenerationResult(True, tokens, elapsed, reply.status, "", "")


def check_generation(url: str, model: t.Optional[str], timeout: float, api_key: t.Optional[str] = None) -> GenerationResult:
    """Send the short completion to the server at ``url`` (its base URL) and judge the answer."""
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    start = time.monotonic()
    reply = http_post_json(url + GENERATE_PATH, request_body(model), timeout=timeout, headers=headers)
    return judge(reply, time.monotonic() - start, timeout, [api_key])


def reading_generates(generate: t.Optional[t.Mapping[str, t.Any]]) -> t.Optional[GenerationResult]:
    """The generation check a reading asks for (GENERATE_OPTIONS: url, model, api_key, timeout), or None when none is
    asked for or its timeout is 0. A reading decides whether a running server is left alone: /health alone would keep a
    server whose engine core is dead."""
    if not generate or not generate.get("timeout"):
        return None
    return check_generation(str(generate["url"]).rstrip("/"), generate.get("model"), float(generate["timeout"]),
                            generate.get("api_key"))
