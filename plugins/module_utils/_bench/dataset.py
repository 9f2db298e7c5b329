# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A dataset workload: requests read from a file, sampled with the seed, the same ones in the same order every time.

Formats (workload.format, V(auto) tells them by the first character: '[' is ShareGPT):
- jsonl: one JSON object a line, {"prompt": str} (a completions prompt) or {"messages": [{"role", "content"}, ...]}
  (a chat conversation), each with an optional "output_len" (tokens to generate; else the module's output_len).
  A line with "conversations" is a ShareGPT entry. Blank lines are skipped.
- sharegpt: a JSON list of {"conversations": [{"from": "human" | "gpt", "value": str}, ...]}; the first human turn is
  the prompt, the length in words of the first gpt answer after it the output length. Entries without a human turn
  (ShareGPT has some) are skipped; an entry that is not of this shape fails.

The entries whose prompt (words of all message contents) is within min_prompt_len..max_prompt_len are the pool; the
seed shuffles it once, and request i of a repeat is entry i of that order (the order again from its start when a
repeat asks for more requests than the pool holds). So every repeat, every level of a sweep and every configuration
of a matrix sends the same requests in the same order. The warm-up takes entries from the end of the order, not
those of the repeats when the pool holds enough.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import random
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_body
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import (
    DATASET, WorkloadError, WorkloadSpec, json_lines, lengths, line_error, read_text, words)

MAX_OUTPUT = 1024 * 1024
ROLES = ("system", "user", "assistant", "tool", "developer")


class Entry(t.NamedTuple):
    """One request of a dataset: a prompt or chat messages, the prompt's words, the output length asked for (None:
    the module's output_len) and the file's line it came from."""
    prompt: t.Optional[str]
    messages: t.Optional[t.Tuple[t.Dict[str, str], ...]]
    prompt_words: int
    output_len: t.Optional[int]
    line: int


class Dataset:
    """A dataset file read and filtered; request(i) is the i-th request of the seed's order."""

    kind = DATASET

    def __init__(self, spec: WorkloadSpec, seed: int, output_len: int) -> None:
        path = t.cast(str, spec.file)
        self.file = path
        text, self.sha256 = read_text(path)
        fmt = spec.format
        if fmt == "auto":
            fmt = "sharegpt" if text.lstrip()[:1] == "[" else "jsonl"
        entries = parse_sharegpt(path, text) if fmt == "sharegpt" else parse_jsonl(path, text)
        if not entries:
            raise WorkloadError("workload.file: %r holds no request" % path)
        low, high = spec.min_prompt_len or 1, spec.max_prompt_len
        self.pool = [entry for entry in entries if entry.prompt_words >= low and (high is None or entry.prompt_words <= high)]
        if not self.pool:
            raise WorkloadError("workload.file: %r: none of its %d requests has a prompt of %d to %s words (min_prompt_len, "
                                "max_prompt_len); its prompts have %d to %d" % (
                                    path, len(entries), low, high if high is not None else "any number of", min(
                                        entry.prompt_words for entry in entries), max(entry.prompt_words for entry in entries)))
        self.order = list(range(len(self.pool)))
        random.Random("%d/dataset" % seed).shuffle(self.order)
        self.output_len_default = output_len

    def entry(self, index: int) -> Entry:
        return self.pool[self.order[index % len(self.order)]]

    def warmup_entry(self, index: int) -> Entry:
        return self.pool[self.order[-1 - index % len(self.order)]]

    def output_len(self, entry: Entry) -> int:
        return entry.output_len if entry.output_len is not None else self.output_len_default

    def body(self, entry: Entry, endpoint: str, model: str, ignore_eos: bool) -> bytes:
        return request_body(endpoint, model, entry.prompt or "", self.output_len(entry), ignore_eos,
                            messages=entry.messages)

    def summary(self, requests: t.Optional[int]) -> t.Dict[str, t.Any]:
        """The result's `workload`: the file, its hash and the lengths of what one repeat sends (the whole pool for a
        repeat bounded only by its duration)."""
        count = requests if requests is not None else len(self.pool)
        sent = [self.entry(index) for index in range(count)]
        return {"kind": DATASET, "file": self.file, "sha256": self.sha256, "requests": requests,
                "prompt_len": lengths([entry.prompt_words for entry in sent]),
                "output_len": lengths([self.output_len(entry) for entry in sent])}


def _output_len(path: str, line: int, value: t.Any) -> t.Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT:
        raise line_error(path, line, "output_len %r is not a whole number of tokens from 1 to %d" % (value, MAX_OUTPUT))
    return value


def _messages(path: str, line: int, value: t.Any) -> t.Tuple[t.Dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise line_error(path, line, "messages is not a non-empty list of {role, content}")
    checked = []
    for number, message in enumerate(value, 1):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            raise line_error(path, line, "message %d is not {\"role\": one of %s, \"content\": a string}: %s"
                             % (number, ", ".join(ROLES), json.dumps(message)[:200]))
        checked.append({"role": message["role"], "content": message["content"]})
    return tuple(checked)


def jsonl_entry(path: str, line: int, obj: t.Any) -> t.Optional[Entry]:
    """One JSONL line's request (None for a ShareGPT entry without a human turn)."""
    if not isinstance(obj, dict):
        raise line_error(path, line, "not a JSON object but %s" % type(obj).__name__)
    if "conversations" in obj:
        return sharegpt_entry(path, line, obj)
    if ("prompt" in obj) == ("messages" in obj):
        raise line_error(path, line, "give either \"prompt\" (a string) or \"messages\" (a list of {role, content}), not %s"
                         % ("both" if "prompt" in obj else "neither"))
    output_len = _output_len(path, line, obj.get("output_len"))
    if "prompt" in obj:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise line_error(path, line, "prompt %s is not a non-empty string" % json.dumps(prompt)[:200])
        return Entry(prompt, None, words(prompt), output_len, line)
    messages = _messages(path, line, obj["messages"])
    count = sum(words(message["content"]) for message in messages)
    if not count:
        raise line_error(path, line, "the messages have no words")
    return Entry(None, messages, count, output_len, line)


def sharegpt_entry(path: str, line: int, obj: t.Any) -> t.Optional[Entry]:
    """The first human turn as the prompt, the words of the gpt answer after it as the output length (an explicit
    "output_len" wins); None for a conversation without a human turn."""
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        raise line_error(path, line, "not a ShareGPT entry {\"conversations\": [{\"from\", \"value\"}, ...]}")
    prompt = None
    answer = None
    for number, turn in enumerate(obj["conversations"], 1):
        if not isinstance(turn, dict) or not isinstance(turn.get("from"), str) or not isinstance(turn.get("value"), str):
            raise line_error(path, line, "conversation turn %d is not {\"from\": a string, \"value\": a string}: %s"
                             % (number, json.dumps(turn)[:200]))
        if prompt is None:
            if turn["from"] == "human" and turn["value"].strip():
                prompt = turn["value"]
        elif turn["from"] == "gpt":
            answer = turn["value"]
            break
    if prompt is None:
        return None
    output_len = _output_len(path, line, obj.get("output_len"))
    if output_len is None and answer is not None and words(answer):
        output_len = words(answer)
    return Entry(prompt, None, words(prompt), output_len, line)


def parse_jsonl(path: str, text: str) -> t.List[Entry]:
    entries = []
    for line, obj in json_lines(path, text):
        entry = jsonl_entry(path, line, obj)
        if entry is not None:
            entries.append(entry)
    return entries


def parse_sharegpt(path: str, text: str) -> t.List[Entry]:
    """A JSON list read entry by entry, so a bad entry is named by the line it starts on."""
    decoder = json.JSONDecoder()
    position = len(text) - len(text.lstrip())
    if text[position:position + 1] != "[":
        raise line_error(path, text.count("\n", 0, position) + 1, "a ShareGPT file is a JSON list ('[' first)")
    position += 1
    entries = []
    while True:
        position = _skip_space(text, position)
        if text[position:position + 1] == "]":
            break
        line = text.count("\n", 0, position) + 1
        try:
            obj, position = decoder.raw_decode(text, position)
        except ValueError as exc:
            raise line_error(path, getattr(exc, "lineno", line), "not JSON: %s" % exc) from None
        entry = sharegpt_entry(path, line, obj)
        if entry is not None:
            entries.append(entry)
        position = _skip_space(text, position)
        mark = text[position:position + 1]
        if mark == ",":
            position += 1
        elif mark != "]":
            raise line_error(path, text.count("\n", 0, position) + 1, "expected ',' or ']' after an entry, found %r" % (mark or "the end"))
    rest = text[position + 1:].strip()
    if rest:
        raise line_error(path, text.count("\n", 0, position) + 1, "text after the end of the list")
    return entries


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position
