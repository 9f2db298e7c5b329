# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The OpenAI-compatible side: reading /v1/completions and /v1/chat/completions requests, writing bodies.

Prompt tokens are whitespace-separated words (or the ids of a token-id list, as their decimal text); for chat, the
words of every message's content in order. Each generated token is one word with a leading space, so a client can
count the words of the text it received.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

VOCABULARY = ("the", "GPU", "holds", "memory", "until", "every", "worker", "exits", "and", "a", "fresh",
              "reading", "proves", "it", "free", "so", "new", "server", "can", "start", "on", "each", "host",
              "of", "fleet")
COMPLETION_DEFAULT_MAX_TOKENS = 16  # as the OpenAI completions API


class ApiError(Exception):
    """An HTTP error answered with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, err_type: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> bytes:
        return dumps({"error": error_info(self.message, self.err_type, self.status, self.param)})


def bad_request(message: str, param: Optional[str] = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


def error_info(message: str, err_type: str, code: int, param: Optional[str] = None) -> Dict[str, Any]:
    return {"message": message, "type": err_type, "param": param, "code": code}


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def token_words(first: int, count: int) -> List[str]:
    """The words of tokens first .. first+count-1 of a completion."""
    return [VOCABULARY[(first + offset) % len(VOCABULARY)] for offset in range(count)]


def token_text(first: int, count: int) -> str:
    """The text of tokens first .. first+count-1 of a completion: one word each."""
    return "".join(" " + word for word in token_words(first, count))


@dataclass(frozen=True)
class GenRequest:  # pylint: disable=too-many-instance-attributes
    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int
    output_tokens: int
    finish_reason: str
    stream: bool
    include_usage: bool
    prompt: Tuple[str, ...] = ()  # the prompt's tokens (prompt_tokens of them), what the prefix cache hashes


def _int_field(body: Dict[str, Any], name: str, minimum: int) -> Optional[int]:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise bad_request(f"{name} must be an integer of at least {minimum}, got {value!r}", name)
    return value


def _bool_field(body: Dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be a boolean, got {value!r}", name)
    return value


def _words(text: Any, param: str) -> List[str]:
    if not isinstance(text, str):
        raise bad_request(f"{param} must be a string", param)
    return text.split()


def _prompt_words(prompt: Any) -> List[str]:
    """A string, a list of token ids, or a batch of exactly one of these."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.split()
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return [str(token) for token in prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(item, (str, list)) for item in prompt):
        raise bad_request("the simulated server takes one prompt per request, not a batch", "prompt")
    raise bad_request("prompt must be a string or a list of token ids", "prompt")


def _message_words(messages: Any) -> List[str]:
    """The words of every message's content, in order (roles and non-text parts add none)."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", "messages")
    words: List[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request("each message must be an object with a string role", "messages")
        content = message.get("content")
        if content is None:
            continue
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    raise bad_request("content parts must be objects", "messages")
                if part.get("type") == "text":
                    words.extend(_words(part.get("text"), "messages"))
        else:
            words.extend(_words(content, "messages"))
    return words


def parse_generation(raw: bytes, chat: bool, served_names: List[str], max_model_len: int,
                     natural_len: int) -> GenRequest:
    """Validate a request body as vLLM would; the output length follows max_tokens, ignore_eos and natural_len."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(f"the request body is not valid JSON: {error}") from error
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if model is None:
        model = served_names[0]
    elif not isinstance(model, str):
        raise bad_request("model must be a string", "model")
    elif model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    if chat:
        prompt = _message_words(body.get("messages"))
        max_tokens = _int_field(body, "max_completion_tokens", 1)
        if max_tokens is None:
            max_tokens = _int_field(body, "max_tokens", 1)
    else:
        if "prompt" not in body:
            raise bad_request("prompt is required", "prompt")
        prompt = _prompt_words(body["prompt"])
        max_tokens = _int_field(body, "max_tokens", 1)
        if max_tokens is None:
            max_tokens = COMPLETION_DEFAULT_MAX_TOKENS
    prompt_tokens = len(prompt)
    if max_tokens is None:  # chat without a limit: what is left of the context, as vLLM does
        max_tokens = max_model_len - prompt_tokens
    if prompt_tokens + max_tokens > max_model_len or max_tokens < 1:
        what = "messages" if chat else "prompt"
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested"
            f" {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {what}, {max_tokens} in the completion)."
            f" Please reduce the length of the {what} or completion.")
    count = _int_field(body, "n", 1)
    if count not in (None, 1):
        raise bad_request("the simulated server generates one choice per request (n must be 1)", "n")
    stream = _bool_field(body, "stream")
    ignore_eos = _bool_field(body, "ignore_eos")
    min_tokens = _int_field(body, "min_tokens", 0) or 0
    if min_tokens > max_tokens:
        raise bad_request(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}",
                          "min_tokens")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("stream_options must be an object", "stream_options")
    include_usage = bool(options and _bool_field(options, "include_usage"))
    natural = max(natural_len, min_tokens)
    if ignore_eos or natural >= max_tokens:
        output, reason = max_tokens, "length"
    else:
        output, reason = natural, "stop"
    return GenRequest(chat=chat, model=model, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
                      output_tokens=output, finish_reason=reason, stream=stream, include_usage=include_usage,
                      prompt=tuple(prompt))


class Bodies:
    """The JSON bodies and SSE events of one request (id, creation time and model fixed). When the prefix cache held
    some of the prompt, the usage reports them as `prompt_tokens_details.cached_tokens`, as vLLM does."""

    def __init__(self, request: GenRequest, cached_tokens: int = 0) -> None:
        self.request = request
        self.cached_tokens = cached_tokens
        prefix = "chatcmpl" if request.chat else "cmpl"
        self.request_id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        obj = "chat.completion.chunk" if request.chat else "text_completion"
        head = f'{{"id":"{self.request_id}","object":"{obj}","created":{self.created},"model":{json.dumps(request.model)}'
        self._head = head
        self._chunk_head = head + ',"choices":[{"index":0,' + ('"delta":{"content":' if request.chat else '"text":')
        self._chunk_mid = '},"logprobs":null,"finish_reason":' if request.chat else ',"logprobs":null,"finish_reason":'
        self._chunk_tail = "}]}" if request.chat else ',"stop_reason":null}]}'

    def usage(self, completion_tokens: int) -> Dict[str, Any]:
        prompt = self.request.prompt_tokens
        usage: Dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion_tokens,
                                 "completion_tokens": completion_tokens}
        if self.cached_tokens > 0:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage

    def chunk_event(self, text: str, finish_reason: Optional[str]) -> bytes:
        data = self._chunk_head + json.dumps(text) + self._chunk_mid + json.dumps(finish_reason) + self._chunk_tail
        return b"data: " + data.encode() + b"\n\n"

    def role_event(self) -> bytes:
        data = self._head + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,' \
            '"finish_reason":null}]}'
        return b"data: " + data.encode() + b"\n\n"

    def usage_event(self, completion_tokens: int) -> bytes:
        usage = json.dumps(self.usage(completion_tokens), separators=(",", ":"))
        data = self._head + ',"choices":[],"usage":' + usage + "}"
        return b"data: " + data.encode() + b"\n\n"

    @staticmethod
    def error_event(message: str) -> bytes:
        return b"data: " + dumps({"error": error_info(message, "InternalServerError", 500)}) + b"\n\n"

    def full(self, text: str, completion_tokens: int) -> bytes:
        request = self.request
        if request.chat:
            choice: Dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": request.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": request.finish_reason,
                      "stop_reason": None}
        return dumps({"id": self.request_id, "object": "chat.completion" if request.chat else "text_completion",
                      "created": self.created, "model": request.model, "choices": [choice],
                      "usage": self.usage(completion_tokens)})


DONE_EVENT = b"data: [DONE]\n\n"
