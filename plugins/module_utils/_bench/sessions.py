# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A sessions workload: N conversations of M turns, each turn the whole conversation so far plus a new user message.

Turn 1 of a session is one user message of input_len words; each later turn appends the answer the server streamed
for the turn before (its text as received) and a new user message of input_len words, after think_time seconds. The
chat endpoint gets the messages; the completions endpoint their transcript (prompts.transcript), so each turn's
prompt starts with the one before it word for word: what a prefix cache can reuse. User messages are drawn from the
seed, the phase, the session and the turn, so each repeat starts cold and every configuration gets the same ones.

A Conversation makes one session's bodies turn by turn: the body's JSON is kept encoded, message by message, and
prepare() draws and encodes the next user message ahead of its turn (the client calls it once the turn before has been
sent), so the body at the end of a turn is the answer's encoding and a concatenation of bytes.

per_turn(): each turn's requests, TTFT and prompt tokens the server reported as cached (usage.prompt_tokens_details):
turn 1 against later turns shows what prefix caching buys.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import random
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import prompt_words, request_body
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sse import CHAT
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import mean, percentile
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import SESSIONS, WorkloadSpec, lengths, words


class Sessions:
    """The sessions workload: its shape, and each phase's conversations."""

    kind = SESSIONS

    def __init__(self, spec: WorkloadSpec, seed: int, input_len: int, output_len: int) -> None:
        self.sessions = spec.sessions
        self.turns = spec.turns
        self.think_time = spec.think_time
        self.seed = seed
        self.input_len = input_len
        self.output_len = output_len
        self.prompt_words: t.List[int] = []  # of the first phase measured, for the summary

    @property
    def requests(self) -> int:
        return self.sessions * self.turns

    def conversations(self, phase: str) -> "Conversations":
        return Conversations(self, phase)

    def summary(self, requests: t.Optional[int] = None) -> t.Dict[str, t.Any]:
        """The result's `workload`: the prompt lengths are those the first repeat sent (they grow with the answers);
        `requests` (the repeat's cap) is not used: sessions x turns are."""
        return {"kind": SESSIONS, "file": None, "sha256": None, "requests": self.requests,
                "prompt_len": lengths(self.prompt_words), "output_len": lengths([self.output_len] * self.requests)}


class Conversations:
    """One phase's conversations: each session's Conversation, and the words of every prompt made."""

    def __init__(self, sessions: Sessions, phase: str) -> None:
        self.shape = sessions
        self.phase = phase
        self.prompt_words: t.List[int] = []

    def user_message(self, session: int, turn: int) -> str:
        rng = random.Random("%d/%s/session/%d/turn/%d" % (self.shape.seed, self.phase, session, turn))
        return prompt_words(self.shape.input_len, rng)

    def conversation(self, session: int, endpoint: str, model: str, ignore_eos: bool) -> "Conversation":
        return Conversation(self, session, endpoint, model, ignore_eos)

    def body(self, session: int, answers: t.Sequence[str], endpoint: str, model: str, ignore_eos: bool) -> bytes:
        """The body of session `session`'s turn len(answers) (from 0), after the turns that got `answers`."""
        conversation = self.conversation(session, endpoint, model, ignore_eos)
        answer: t.Optional[str] = None
        for earlier in answers:
            conversation.extend(answer)
            answer = earlier
        return conversation.body(answer)


class Conversation:
    """One session's request bodies, turn by turn: users and answers alternating, each turn's body the one before,
    its answer and a new user message. The chat endpoint gets the messages, the completions endpoint their
    transcript (prompts.transcript); the bytes are those prompts.request_body makes of the same conversation."""

    def __init__(self, conversations: Conversations, session: int, endpoint: str, model: str, ignore_eos: bool) -> None:
        self.conversations = conversations
        self.session = session
        self.chat = endpoint == CHAT
        # the body of an empty conversation, cut where the messages (or the transcript's text) go
        frame = request_body(endpoint, model, "", conversations.shape.output_len, ignore_eos, messages=[])
        key = b'"messages":[' if self.chat else b'"prompt":"'
        cut = frame.index(key) + len(key)
        self.head, self.tail = frame[:cut], frame[cut:]
        self.parts: t.List[bytes] = []  # the conversation so far, each message encoded as it goes in the body
        self.turns = 0  # user messages in it
        self.words = 0  # words of its messages' contents
        self.prepared: t.Optional[t.Tuple[bytes, int]] = None  # the next user message, encoded, and its words

    def prepare(self) -> None:
        """Draw and encode the next turn's user message, unless that is done already."""
        if self.prepared is None:
            text = self.conversations.user_message(self.session, self.turns)
            self.prepared = (self._encode("user", text), words(text))

    def extend(self, answer: t.Optional[str]) -> bytes:
        """Add `answer` (the reply to the last user message; None before the first turn) and the next user message
        (the prepared one, or drawn now); the body of that turn."""
        if answer is not None:
            self.parts.append(self._encode("assistant", answer))
            self.words += words(answer)
        self.prepare()
        part, count = t.cast(t.Tuple[bytes, int], self.prepared)
        self.prepared = None
        self.parts.append(part)
        self.words += count
        self.turns += 1
        return self.head + b"".join(self.parts) + self.tail

    def body(self, answer: t.Optional[str] = None) -> bytes:
        """extend(answer), the prompt's words counted in the phase's prompt_words."""
        body = self.extend(answer)
        self.conversations.prompt_words.append(self.words)
        return body

    def _encode(self, role: str, text: str) -> bytes:
        """A message as the body's JSON has it: a chat message object after a comma (none for the first), or the
        text of the transcript after a blank line (none for the first), without quotes."""
        if self.chat:
            encoded = json.dumps({"role": role, "content": text}, separators=(",", ":"))
            return (b"," if self.parts else b"") + encoded.encode("utf-8")
        return json.dumps("\n\n" + text if self.parts else text)[1:-1].encode("utf-8")


def per_turn(outcomes: t.Sequence[Outcome], turns: int) -> t.List[t.Dict[str, t.Any]]:
    """Each turn's completed requests, TTFT (mean, p50, p90, p99 in ms) and the prompt tokens the server reported
    as cached (their sum; None when no request of the run had the figure, or the turn completed none). vLLM leaves
    prompt_tokens_details out when nothing was cached, so once one request has it, a request without counts 0.
    Request index = session * turns + turn."""
    reported = any(outcome.cached_tokens is not None for outcome in outcomes if outcome.success)
    figures = []
    for turn in range(turns):
        done = [outcome for outcome in outcomes if outcome.index % turns == turn and outcome.success]
        ttfts = sorted(outcome.ttft * 1000.0 for outcome in done)
        figures.append({
            "turn": turn + 1, "requests": len(done),
            "ttft_ms": {"mean": mean(ttfts), "p50": percentile(ttfts, 50, presorted=True),
                        "p90": percentile(ttfts, 90, presorted=True), "p99": percentile(ttfts, 99, presorted=True)}
            if ttfts else None,
            "cached_tokens": sum(outcome.cached_tokens or 0 for outcome in done) if reported and done else None,
        })
    return figures
