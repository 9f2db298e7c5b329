#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_benchmark
short_description: Measure an OpenAI-compatible LLM server (vLLM) with streaming requests, as vllm bench serve does
version_added: 0.2.0
description:
  - Sends O(num_requests) streaming requests of O(input_len) words and O(output_len) tokens to the server at O(url),
    at most O(concurrency) at a time, once per repeat, after O(warmup_requests) discarded ones, and returns time to first token
    (TTFT), time per output token (TPOT), inter-token latency (ITL), end-to-end latency (E2EL), throughputs and C(decode_tok_s),
    with the names and definitions of C(vllm bench serve), so figures compare one to one.
  - TTFT runs from sending a request to the first chunk that carries generated content (the chat endpoint's first, role-only chunk
    carries none). TPOT of a request is (E2EL - TTFT) / (output tokens - 1); ITL is every gap between two content chunks (a chunk can
    carry several tokens, so ITL and TPOT differ when the server packs tokens). C(decode_tok_s) is 1000 / median TPOT, the decode rate
    of one stream.
  - Output tokens are the server's own count (C(usage) of the final chunk, asked for with C(stream_options.include_usage)), never a count
    of chunks. A server that sends no usage gets its chunks counted, and the result says so (RV(runs[].approximate_token_count)).
  - A request that fails (an HTTP error, an error event after HTTP 200, a timeout, a dropped connection, a stream without content)
    counts in RV(runs[].failed) with its reason; the task fails only when nothing could be measured.
  - Reads the server's C(vllm:generation_tokens_total) from O(metrics_url) before and after each phase and reports its count next to the
    client's; a difference is a warning. From the same text, the server's own view of each repeat, RV(runs[].server), with its TTFT
    and end-to-end latency histograms, preemptions and peak KV-cache use, so a TTFT that the client sees but the server does not (the
    network, queueing before the server, tokens held back for a chunk) shows as C(runs[].server.ttft_gap_ms).
  - C(decode_tok_s) (from vllm bench serve's TPOT) is the figure of record; RV(knee) and the benchmark matrix judge by it. Next to it,
    C(decode_tok_s_chunk_aware) counts only the tokens after the first chunk over the time after it; see RV(runs[].decode_tok_s_chunk_aware)
    for when to read which.
  - Works with any OpenAI-compatible server that streams C(/v1/completions) or C(/v1/chat/completions). C(/v1/models) is asked
    only to check or find the model, and C(/metrics) is optional.
  - Gives O(concurrency) or O(request_rate) as a list to sweep its levels in one task, one result per level (RV(sweep)), with the
    knee of the sweep (RV(knee)).
  - Runs for O(duration) seconds instead of a number of requests when asked; requests still running at the end are counted apart
    (RV(runs[].in_flight_at_end)), not as failures.
  - Reports the latency percentiles asked for (O(percentiles)) and, with service-level targets (O(goodput)), the share and rate of
    requests that met all of them, as vllm bench serve's C(--metric-percentiles) and C(--goodput) do.
  - Checks every option before it sends anything; a bad value fails the task with the option and the value named, and no request
    reaches the server.
  - Uses only the Python standard library (asyncio over plain sockets, TLS for https); one core reads tens of thousands of tokens a
    second with accurate timing. Runs on the GPU host or anywhere that reaches the server (for example with C(delegate_to)).
  - Sends synthetic prompts by default; O(workload) sends a dataset's prompts (JSONL or ShareGPT), replays a timed trace
    (Mooncake's format) on its schedule, or runs multi-turn sessions, each turn appending the answer to the one before.
  - Never changes the server's state.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Checks the options and sends nothing; the result says that nothing ran.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
options:
  url:
    description:
      - Base URL of the server, V(http://host:port) or V(https://host:port), optionally with a path prefix; a trailing V(/v1) is
        ignored. Requests go to V(<url>/v1/completions) or V(<url>/v1/chat/completions).
    type: str
    default: http://127.0.0.1:8000
  model:
    description:
      - Model name to ask for. When the server lists models at V(/v1/models), it must be one of them.
      - When V(/v1/models) does not answer with a model list (HTTP 404 on a server that does not have it, for one), the model is used as
        given, with a warning. A server that does not answer at all fails the task either way.
      - Omit it to use the first model the server lists; the server must then have V(/v1/models).
    type: str
  endpoint:
    description:
      - Which API to call.
      - Omit it for V(completions), with one difference from setting it. When the first warmup request (without a warmup, the
        first repeat's first request) is answered HTTP 404 on C(/v1/completions), as by a server that serves only chat, the whole
        run goes through C(/v1/chat/completions) instead (that repeat is sent again), with a warning, RV(endpoint) V(chat) and
        RV(endpoint_fallback) saying why. Set to V(completions), a 404 fails every request as any other HTTP error does.
    type: str
    choices: [completions, chat]
  input_len:
    description:
      - Prompt length in words (short common English words, most of them one token; the server's count of prompt tokens is what
        RV(runs[].total_input_tokens) reports).
      - For a O(workload.kind=sessions) workload, the length of each new user message; a dataset or a trace sets its own.
    type: int
    default: 1024
  output_len:
    description:
      - Tokens to generate per request (C(max_tokens)). With O(ignore_eos=true) every request decodes exactly this many.
      - A dataset's entry may set its own (C(output_len), or the length of a ShareGPT answer); a trace sets its own (C(output_length)).
    type: int
    default: 128
  num_requests:
    description:
      - Requests per repeat (C(--num-prompts) of vllm bench serve).
      - Without O(duration) the default is 64, for a measurement on its own; the role gpuops.fleet.vllm_server sends 32 per
        repeat by default (C(vllm_server_benchmark_num_requests)), because its benchmark runs right after a restart, once per
        configuration and round in C(benchmark_matrix.yml), where many short measurements say more than a few long ones.
      - With O(duration) there is no default; the repeat sends requests until the time is up. Given together with O(duration),
        it is a cap; a repeat ends at whichever comes first, the time or this many requests all answered.
      - For a O(workload.kind=replay), the first lines of the trace to send (default all); a O(workload.kind=sessions) workload
        takes none (O(workload.sessions) x O(workload.turns) are the requests).
    type: int
  duration:
    description:
      - Run each repeat for this many seconds instead of a number of requests (AIPerf's and GuideLLM's C(max_seconds)). New
        requests arrive only within it; the requests still running when it ends are closed and counted in
        RV(runs[].in_flight_at_end), not as failed, and in no other figure. Throughputs divide by the repeat's duration.
      - Combines with O(num_requests) (a cap, see there). The warmup is still O(warmup_requests) requests.
      - Omit it to run O(num_requests) requests per repeat, each one to its end.
    type: float
  concurrency:
    description:
      - Most requests in flight at once (C(--max-concurrency)); for a O(workload.kind=sessions) workload, most sessions at once.
      - Omit it for V([8]), or, for a O(workload.kind=replay), for no limit (each request is sent when the trace says; a
        limit holds requests back, which shows as their send slip, C(runs[].schedule_slip_ms)).
      - A list of levels, V([1, 8, 32, 64]) for one, is a sweep; the whole benchmark (warmup and every repeat) runs at each
        level in turn, in the order given, and RV(sweep) has one result per level, RV(knee) the knee. A single value (or a list
        of one) runs one level. Each level draws prompts of its own, so the server's prefix cache cannot favour a later one
        (a dataset's prompts are the file's, the same at every level).
      - Only one of O(concurrency) and O(request_rate) may be a list of more than one level.
    type: list
    elements: int
  request_rate:
    description:
      - Mean arrival rate in requests per second; arrivals follow a Poisson process (exponential gaps), as C(--request-rate) with
        burstiness 1.
      - Omit it to send every request at once (limited by O(concurrency)), vllm bench serve's default (V(inf)).
      - A list of rates is a sweep, as for O(concurrency) (V(inf) may be one of them). O(concurrency) still caps the requests in
        flight at every rate; raise it so that the rate, not the cap, sets the load.
    type: list
    elements: float
  knee_tolerance:
    description:
      - For a sweep, how far in percent the decode rate per stream (the median of C(decode_tok_s) in RV(metrics)) may fall below the lowest
        level's before the server counts as saturated. The knee (RV(knee)) is the highest level reached, going up from the lowest,
        before the first level that falls further (or completed nothing).
      - The 10% default tells a batch that still decodes nearly at single-stream speed from an overloaded server; a smaller value
        finds an earlier knee, and needs repeats with little spread to mean anything.
    type: float
    default: 10
  percentiles:
    description:
      - Percentiles of TTFT, TPOT, ITL and E2EL to report (vllm bench serve's C(--metric-percentiles)), each more than 0 and at
        most 100.
      - Each gives result keys C(p<N>_<figure>_ms), like C(p90_ttft_ms); a fraction gives an underscore for the dot, C(p99_9_ttft_ms)
        for 99.9, so that Jinja can read the key as an attribute. The file of O(save_result) keeps vllm bench serve's C(p99.9_ttft_ms).
      - C(p90_*) and C(p99_*) stay in the result as long as V(90) and V(99) are in the list (as by default).
    type: list
    elements: float
    default: [50, 90, 99]
  goodput:
    description:
      - Service-level targets in milliseconds (vllm bench serve's C(--goodput)). A completed request is good when each figure given
        is at most its target; a failed request is never good. The result gets RV(runs[].good_requests),
        RV(runs[].goodput_pct) (their share of the requests that ended), RV(runs[].request_goodput) (good requests per second) and
        RV(runs[].slo_missed).
      - Give at least one target.
    type: dict
    suboptions:
      ttft_ms:
        description: Most time to first token, in milliseconds.
        type: float
      tpot_ms:
        description: Most time per output token, in milliseconds ((E2EL - TTFT) / (output tokens - 1), 0 for one token).
        type: float
      e2el_ms:
        description: Most end-to-end latency, in milliseconds.
        type: float
  metrics_url:
    description:
      - Where the server's Prometheus metrics are read for the token cross-check, V(http(s)://...) or a path under O(url), such as
        V(/vllm/metrics) (AIPerf's mock server has them there).
      - Omit it for V(<url>/metrics). An empty string reads no metrics at all; the cross-check is skipped, and RV(notes) says so.
        A URL that does not answer with the counter skips the cross-check with a warning.
    type: str
  warmup_requests:
    description: Requests sent before the first repeat and left out of every figure (at most O(concurrency) at a time).
    type: int
    default: 4
  repeats:
    description:
      - How many times the O(num_requests) requests are run. RV(metrics) gives each figure's median across the repeats with its
        min and max, and from 3 repeats on a 95% confidence interval of the mean (Student t).
      - Each repeat draws different prompts, so the server's prefix cache cannot make a later repeat look faster (a dataset's
        prompts are the file's, the same in every repeat).
    type: int
    default: 3
  timeout:
    description: Seconds a request may take from connecting to its last byte; a slower one fails with reason V(timeout).
    type: float
    default: 300
  api_key:
    description: Sent as C(Authorization Bearer) with every request (vLLM's C(--api-key)).
    type: str
  seed:
    description: Seed of the prompts and of the arrival times; the same seed gives the same requests.
    type: int
    default: 0
  ignore_eos:
    description: Ask the server to ignore the end-of-sequence token (vLLM's C(ignore_eos)), so each request decodes O(output_len) tokens.
    type: bool
    default: true
  validate_certs:
    description: Check the server's TLS certificate (https only).
    type: bool
    default: true
  workload:
    description:
      - What the requests are. Omit it for the synthetic prompts of O(input_len) words (O(workload.kind=synthetic)).
      - The workload's file is read and checked with the other options, before any request; a bad line fails the task naming the
        file and the line, and nothing is sent. RV(workload) describes what was sent.
    type: dict
    suboptions:
      kind:
        description:
          - V(synthetic), random words (the default).
          - V(dataset), requests from O(workload.file), sampled with O(seed) and filtered by prompt length. The seed shuffles
            the file's requests once; each repeat, each level of a sweep and each configuration of C(benchmark_matrix.yml) (and
            both sides of C(rollout_vllm.yml)'s gate) sends the same requests in the same order, from the start of that
            order again when it asks for more than the file holds. The warmup takes requests from the end of the order.
          - V(replay), a timed trace from O(workload.file) (Mooncake's format), each request sent at its C(timestamp) (milliseconds,
            counted from the first line's), its prompt C(input_length) words built from its C(hash_ids) (see
            O(workload.block_size)), C(output_length) tokens. Each repeat sends the whole trace (or its first O(num_requests)
            lines). C(runs[].schedule_slip_ms) says how late the client sent the requests against the trace.
          - V(sessions), O(workload.sessions) conversations of O(workload.turns) turns through the chat endpoint's messages (the
            completions endpoint gets the conversation as one prompt). Turn 1 is a user message of O(input_len) words; each later
            turn adds the answer the server streamed and a new user message, O(workload.think_time) seconds after the answer.
            A failed turn ends its session. C(runs[].per_turn) has each turn's figures.
          - Each repeat of a replay or of sessions draws words of its own (the same ones for the same O(seed)), so no repeat
            finds the one before in the server's prefix cache; a dataset's prompts are the file's, the same in every repeat.
        type: str
        choices: [synthetic, dataset, replay, sessions]
      file:
        description:
          - The file, on the host the task runs on (O(workload.kind=dataset) and V(replay)).
          - 'A dataset: JSON lines, each C({"prompt": "..."}) (a completions prompt; the chat endpoint gets it as one user message)
            or C({"messages": [{"role": "user", "content": "..."}, ...]}) (chat messages; the completions endpoint gets their
            contents, a blank line between them), each with an optional C(output_len) in tokens; or the ShareGPT format, a JSON
            list of C({"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}), whose first
            human turn is the prompt and whose first gpt answer after it gives the output length in words, when the entry has no
            C(output_len). ShareGPT entries without a human turn are skipped. Blank lines are skipped.'
          - 'A trace: JSON lines C({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}),
            timestamps in milliseconds never going back; C(hash_ids) may be left out.'
        type: path
      format:
        description: The dataset file's format; V(auto) reads a file whose first character is C([) as ShareGPT, any other as JSON lines.
        type: str
        choices: [auto, jsonl, sharegpt]
      min_prompt_len:
        description: Only dataset requests whose prompt has at least this many words (all message contents counted).
        type: int
      max_prompt_len:
        description: Only dataset requests whose prompt has at most this many words.
        type: int
      speedup:
        description: Send a replay this many times faster than the trace (V(2) halves every gap); default V(1).
        type: float
      block_size:
        description:
          - Words per C(hash_ids) block of a replay; default V(512), as Mooncake's blocks are 512 tokens.
          - Each hash id is one block of words drawn from O(seed) and the id, so requests whose C(hash_ids) start alike share those
            blocks word for word (a prefix the server can cache); a prompt is its blocks in order, cut at C(input_length) words,
            and ends in words of its own when its blocks are fewer.
        type: int
      sessions:
        description: Conversations of a O(workload.kind=sessions) workload per repeat; default V(8).
        type: int
      turns:
        description: Turns (requests) per conversation; default V(4).
        type: int
      think_time:
        description: Seconds between an answer and the next turn of its conversation; default V(0).
        type: float
  save_result:
    description:
      - Also write the figures to this file (on the host the task runs on) in the JSON shape of C(vllm bench serve --save-result).
        With one repeat the file is one JSON object; with several, one object per repeat, one per line (as C(--append-result)
        writes them). What vllm bench serve does not have is under the key C(gpuops_fleet).
      - The file is output, not server state; it does not make the task changed.
    type: path
notes:
  - A sweep (O(concurrency) or O(request_rate) as a list) answers how much load one server takes before each stream slows down;
    C(benchmark_matrix.yml) compares configurations at one fixed load and should keep one level per run. Use a sweep, and its
    RV(knee), to choose that load (the matrix's concurrency at or below the knee of the baseline configuration), or when the
    question is the capacity itself; run it again after a change of model, GPU count or context length.
  - With a sweep the result grows with the levels (each has its runs); O(save_result) writes every repeat of every level.
  - Compare a figure with another tool's only under the same definition. GuideLLM, for one, calls the gap between tokens TPOT and
    the per-request average ITL, the other way round from vllm bench serve and this module.
seealso:
  - name: vllm bench serve
    description: vLLM's own serving benchmark, whose metric names and definitions this module follows.
    link: https://docs.vllm.ai/en/latest/cli/bench/serve.html
"""

EXAMPLES = r"""
- name: Decode rate of one stream and of 8, three repeats each
  gpuops.fleet.vllm_benchmark:
    url: http://127.0.0.1:8000
    input_len: 1024
    output_len: 256
    num_requests: 32
    concurrency: "{{ item }}"
  loop: [1, 8]
  register: bench

- name: Show the median decode rate per stream with its spread
  ansible.builtin.debug:
    msg: >-
      concurrency {{ item.item }}: {{ item.metrics.decode_tok_s.median | round(1) }} tok/s
      (min {{ item.metrics.decode_tok_s.min | round(1) }}, max {{ item.metrics.decode_tok_s.max | round(1) }})
  loop: "{{ bench.results }}"

- name: Chat endpoint at 4 requests/s, result file for existing vllm bench tooling
  gpuops.fleet.vllm_benchmark:
    url: https://llm.example.com
    api_key: "{{ vault_llm_api_key }}"
    endpoint: chat
    request_rate: 4
    num_requests: 200
    concurrency: 64
    repeats: 1
    save_result: /tmp/bench-chat.json
  delegate_to: localhost

- name: Sweep the concurrency in one task and find the knee
  gpuops.fleet.vllm_benchmark:
    url: http://127.0.0.1:8000
    output_len: 256
    num_requests: 64
    concurrency: [1, 8, 16, 32, 64]
    knee_tolerance: 10
    repeats: 2
  register: sweep

- name: Show where one stream's decode rate stops holding up
  ansible.builtin.debug:
    msg: >-
      knee at concurrency {{ sweep.knee.level }} ({{ sweep.knee.value | round(1) }} tok/s per stream against
      {{ sweep.knee.reference_value | round(1) }} at {{ sweep.knee.reference_level }});
      {{ sweep.sweep | map(attribute='concurrency') | zip(sweep.sweep | map(attribute='metrics.decode_tok_s.median')) | list }}

- name: Two minutes at 2 requests/s against a server without /v1/models or /metrics, with service-level targets
  gpuops.fleet.vllm_benchmark:
    url: http://10.0.0.7:8080
    model: my-model
    request_rate: 2
    concurrency: 64
    duration: 120
    repeats: 1
    percentiles: [50, 95, 99, 99.9]
    goodput:
      ttft_ms: 500
      tpot_ms: 50
    metrics_url: ""
  register: timed

- name: Share of requests within both targets and the 99.9th percentile TTFT
  ansible.builtin.debug:
    msg: "{{ timed.runs[0].goodput_pct }}% good, p99.9 TTFT {{ timed.runs[0].p99_9_ttft_ms }} ms, {{ timed.runs[0].in_flight_at_end }} in flight at the end"

- name: The fleet's own prompts, 200 of them between 16 and 2048 words, the same ones for every configuration
  gpuops.fleet.vllm_benchmark:
    url: http://127.0.0.1:8000
    num_requests: 200
    concurrency: 16
    workload:
      kind: dataset
      file: /data/ShareGPT_V3_unfiltered_cleaned_split.json
      min_prompt_len: 16
      max_prompt_len: 2048

- name: Replay an hour of traffic at twice its pace
  gpuops.fleet.vllm_benchmark:
    url: http://127.0.0.1:8000
    repeats: 1
    workload:
      kind: replay
      file: /data/mooncake_trace.jsonl
      speedup: 2
  register: replay

- name: How late the client sent against the trace
  ansible.builtin.debug:
    msg: "schedule slip p99 {{ replay.runs[0].schedule_slip_ms.p99 | round(1) }} ms"

- name: 16 chats of 5 turns, 2 s of thinking between turns
  gpuops.fleet.vllm_benchmark:
    url: http://127.0.0.1:8000
    endpoint: chat
    input_len: 64
    output_len: 128
    concurrency: 16
    workload:
      kind: sessions
      sessions: 16
      turns: 5
      think_time: 2
  register: chats

- name: TTFT of turn 1 against turn 5 (what the prefix cache buys)
  ansible.builtin.debug:
    msg: "{{ chats.runs[0].per_turn | map(attribute='ttft_ms.p50') | list }}; prefix cache {{ chats.runs[0].prefix_cache }}"
"""

RETURN = r"""
headline:
  description:
    - The figures a summary line shows - C(decode_tok_s) (with C(decode_tok_s_min) and C(decode_tok_s_max)), C(median_tpot_ms),
      C(median_ttft_ms), C(median_itl_ms), C(output_throughput), C(request_throughput) (medians over the repeats), C(completed)
      and C(failed) (over the repeats), C(repeats), and what was sent - C(url), C(model), C(endpoint), C(endpoint_fallback),
      C(workload), C(per_turn), C(schedule_slip_ms), C(prefix_cache), C(input_len), C(output_len), C(num_requests),
      C(concurrency), C(save_result). A figure the run does not have is null.
    - The role C(gpuops.fleet.vllm_server)'s benchmark entry point keeps it as C(vllm_server_benchmark_result).
  returned: unless the options were refused
  type: dict
url:
  description: The server's base URL, as given.
  returned: always
  type: str
  sample: http://127.0.0.1:8000
model:
  description: The model that was benchmarked.
  returned: success
  type: str
  sample: meta-llama/Llama-3.1-8B-Instruct
endpoint:
  description: The API that was called (V(chat) after a fallback, see RV(endpoint_fallback)).
  returned: always
  type: str
  sample: completions
endpoint_fallback:
  description:
    - Why the run went through C(/v1/chat/completions) when O(endpoint) was not set (C(/v1/completions) answered HTTP 404);
      V(null) when it did not.
  returned: always
  type: str
  sample: "/v1/completions answered HTTP 404 Not Found: ..., and endpoint was not set: the benchmark went through /v1/chat/completions instead"
workload:
  description:
    - What the requests were. C(kind) (O(workload.kind)), C(file) and C(sha256) (the file read and its SHA-256; V(null) for
      synthetic prompts and sessions), C(requests) (the requests one repeat sends; V(null) when only O(duration) bounds it), and
      C(prompt_len) and C(output_len), each C(min), C(p50), C(p90) and C(max) over those requests (prompts in words, outputs in
      tokens asked for). For sessions, C(prompt_len) is over the prompts the first repeat sent (they grow with the answers).
    - Also in check mode, from the file read.
  returned: always
  type: dict
  sample: {"kind": "dataset", "file": "/data/prompts.jsonl", "sha256": "9f86d08...", "requests": 200,
           "prompt_len": {"min": 17, "p50": 212, "p90": 890, "max": 2011}, "output_len": {"min": 4, "p50": 180, "p90": 512, "max": 1024}}
metrics:
  description:
    - Each headline figure across the repeats that completed at least one request, as a dict of C(median) (the figure to quote), C(min),
      C(max), C(mean), C(stdev) (sample standard deviation), C(n) (repeats) and C(ci95) (V([low, high]), the 95% confidence interval
      of the mean by Student t, from 3 repeats on; else V(null)).
    - Figures are C(decode_tok_s), C(decode_tok_s_chunk_aware), C(tokens_per_chunk), C(completed), C(failed), C(in_flight_at_end),
      C(duration), C(request_throughput),
      C(output_throughput), C(total_token_throughput), C(total_input_tokens), C(total_output_tokens), and for C(ttft), C(tpot),
      C(itl) and C(e2el) each of C(mean_*_ms), C(median_*_ms), C(std_*_ms) and one C(p<N>_*_ms) per O(percentiles) entry
      (C(p50_*_ms), C(p90_*_ms), C(p99_*_ms) by default); with O(goodput) also C(good_requests), C(goodput_pct) and C(request_goodput).
    - A figure that no repeat has (C(decode_tok_s) when no request generated two tokens) is V(null), never a zero.
    - With a sweep, the figures of the first level (each level's are in RV(sweep)).
    - Empty in check mode.
  returned: always
  type: dict
  sample: {"decode_tok_s": {"median": 47.3, "min": 47.2, "max": 47.4, "mean": 47.3, "stdev": 0.1, "n": 3, "ci95": [47.05, 47.55]}}
runs:
  description: Each repeat's figures, in order; with a sweep, those of the first level. Empty in check mode.
  returned: always
  type: list
  elements: dict
  contains:
    repeat:
      description: Number of the repeat, from 1.
      type: int
      returned: always
    completed:
      description: Requests that ended with a complete stream.
      type: int
      returned: always
    failed:
      description: Requests that failed; see RV(runs[].failed_by_reason) and RV(runs[].errors).
      type: int
      returned: always
    in_flight_at_end:
      description:
        - Requests still running when O(duration) ended, closed then and counted in no other figure (neither completed nor failed);
          always V(0) without O(duration).
      type: int
      returned: always
    failed_by_reason:
      description:
        - Failed requests per reason; only reasons that occurred. V(http_error) (the server answered an HTTP error status),
          V(error_event) (an error sent as an event after HTTP 200), V(timeout) (no complete answer within O(timeout)),
          V(connection_dropped) (the connection closed before the stream ended), V(connect_error) (no connection),
          V(bad_response) (not HTTP, or not a well-formed event stream), V(no_content) (a stream that ended without content).
      type: dict
      returned: always
      sample: {"timeout": 1, "http_error": 2}
    errors:
      description: The first 20 failures, each with C(request) (its index in the repeat), C(reason) and C(error) (the message).
      type: list
      elements: dict
      returned: always
    duration:
      description: Seconds from the first request's arrival to the last answer.
      type: float
      returned: always
    total_input_tokens:
      description: Prompt tokens of the completed requests, as the server counted them (C(usage.prompt_tokens)).
      type: int
      returned: always
    total_output_tokens:
      description: Generated tokens of the completed requests, as the server counted them (C(usage.completion_tokens)).
      type: int
      returned: always
    request_throughput:
      description: Completed requests per second.
      type: float
      returned: always
    output_throughput:
      description: Generated tokens per second, all streams together.
      type: float
      returned: always
    total_token_throughput:
      description: Prompt plus generated tokens per second.
      type: float
      returned: always
    decode_tok_s:
      description: 1000 / RV(runs[].median_tpot_ms), the decode rate of one stream; V(null) when no request generated two tokens.
      type: float
      returned: always
    decode_tok_s_chunk_aware:
      description:
        - The decode rate once the first chunk is out; per request, (output tokens - the first chunk's tokens) / (E2EL - TTFT), and
          1000 / the median of its reciprocal in milliseconds. V(null) when no request sent two content chunks.
        - TPOT counts the first chunk's tokens but not the time they took, so when the first chunk carries k tokens TPOT reads the
          rate too high by (tokens - 1) / (tokens - k). A stream does not say how many tokens each chunk holds, so the first chunk is
          taken to hold the request's average (RV(runs[].tokens_per_chunk)).
        - Which to read. With one token a chunk (vLLM's default) the two agree. vLLM sends the first token on its own also with a
          stream interval or speculative decoding, and then RV(runs[].decode_tok_s) is right and this figure reads low. A server that
          fills the first chunk like the rest (a proxy that batches, the simulator's C(GPUOPS_SIM_TOKENS_PER_CHUNK)) makes
          RV(runs[].decode_tok_s) read high and this one right. So RV(knee), the benchmark matrix and any gate use
          RV(runs[].decode_tok_s), as vllm bench serve reports it and comparable with its results; read this one when
          RV(runs[].tokens_per_chunk) is above 1 and the server is known to fill its first chunk.
      type: float
      returned: always
    tokens_per_chunk:
      description: Output tokens per content chunk over the completed requests (V(1.0) when each chunk carries one token).
      type: float
      returned: always
    median_tpot_ms:
      description:
        - Median over the requests of (E2EL - TTFT) / (output tokens - 1). Likewise C(mean_*), C(std_*) and C(p<N>_*) (one per
          O(percentiles) entry, C(p99_9_*) for 99.9) of C(ttft), C(tpot), C(itl) and C(e2el), all in milliseconds.
      type: float
      returned: always
    good_requests:
      description: Completed requests that met every target of O(goodput).
      type: int
      returned: when O(goodput) is set
    goodput_pct:
      description:
        - RV(runs[].good_requests) as a percentage of the requests that ended (completed and failed; those in flight at the end of
          O(duration) have no verdict). V(null) when none ended.
      type: float
      returned: when O(goodput) is set
    request_goodput:
      description: Good requests per second of the repeat (vllm bench serve's C(request_goodput)).
      type: float
      returned: when O(goodput) is set
    slo_missed:
      description: Completed requests over each target of O(goodput) (one request may miss several).
      type: dict
      returned: when O(goodput) is set
      sample: {"ttft_ms": 3, "tpot_ms": 0}
    approximate_token_count:
      description: True when the server sent no usage for some completed request, whose tokens were then counted as content chunks.
      type: bool
      returned: always
    client_generation_tokens:
      description: Tokens the client saw generated in this repeat, failed requests included.
      type: int
      returned: always
    prefix_cache:
      description:
        - The server's prefix-cache lookups over this repeat, in tokens, from the increase of C(vllm:prefix_cache_queries_total) and
          C(vllm:prefix_cache_hits_total) at O(metrics_url), as C(queries), C(hits) and C(hit_rate) (hits / queries, V(null) without
          queries). V(null) when the server does not count them or no metrics are read.
      type: dict
      returned: always
      sample: {"queries": 40960, "hits": 30720, "hit_rate": 0.75}
    schedule_slip_ms:
      description:
        - For a O(workload.kind=replay), how late the client sent the requests against the trace's schedule (when its bytes went
          out, its connection made, minus when the trace said), in milliseconds, C(mean), C(p50), C(p90), C(p99) and C(max). A
          client that cannot keep up (or a O(concurrency) limit) shows here, never as a slow server; a p99 over 50 ms comes with
          a warning.
      type: dict
      returned: for a replay
      sample: {"mean": 0.4, "p50": 0.3, "p90": 0.7, "p99": 1.9, "max": 3.2}
    per_turn:
      description:
        - For a O(workload.kind=sessions) workload, one entry per turn, in order, with C(turn) (from 1), C(requests) (the turn's
          completed requests), C(ttft_ms) (C(mean), C(p50), C(p90), C(p99) of their TTFT; V(null) when none completed) and
          C(cached_tokens) (the prompt tokens the server said it had cached, C(usage.prompt_tokens_details.cached_tokens),
          summed over them; V(null) when the server did not say).
      type: list
      elements: dict
      returned: for sessions
      sample: [{"turn": 1, "requests": 8, "ttft_ms": {"mean": 210.3, "p50": 208.1, "p90": 230.4, "p99": 233.0}, "cached_tokens": 0},
               {"turn": 2, "requests": 8, "ttft_ms": {"mean": 61.2, "p50": 60.0, "p90": 70.8, "p99": 72.4}, "cached_tokens": 8192}]
    server_generation_tokens:
      description:
        - The increase of the server's C(vllm:generation_tokens_total) for the model over this repeat; V(null) when the server has no
          such counter. A difference from RV(runs[].client_generation_tokens) comes with a warning.
      type: float
      returned: always
    server:
      description:
        - The server's own view of this repeat (warmup left out), from O(metrics_url) read before and after it and sampled every
          0.25 s during it; V(null) when O(metrics_url) is empty or offers none of these metrics.
        - C(ttft) and C(e2el) are the increase of C(vllm:time_to_first_token_seconds) and C(vllm:e2e_request_latency_seconds) for the
          model, each with C(count), C(sum_s), C(mean_ms) and one C(p<N>_ms) per O(percentiles) entry, estimated from the histogram
          buckets as Prometheus' C(histogram_quantile()) does (so only as fine as the buckets); V(null) when the server has no such
          histogram.
        - C(ttft_gap_ms) is the client's mean TTFT minus the server's, time the server never saw (the network, queueing in front of
          the server, tokens held back for a chunk).
        - C(preemptions) is the increase of C(vllm:num_preemptions_total); C(kv_cache_usage_peak) the highest
          C(vllm:kv_cache_usage_perc) (or the older C(vllm:gpu_cache_usage_perc)) read during the repeat, from 0 to 1, with
          C(kv_cache_samples) readings; C(counter_reset) is true when a counter went down (the server restarted), and the figures then
          count from zero.
      type: dict
      returned: always
      sample: {"ttft": {"count": 64, "sum_s": 1.62, "mean_ms": 25.3, "p50_ms": 25.1, "p90_ms": 37.6, "p99_ms": 39.8},
               "e2el": {"count": 64, "sum_s": 172.9, "mean_ms": 2701.6, "p50_ms": 3750.0, "p90_ms": 4750.0, "p99_ms": 4975.0},
               "ttft_gap_ms": 1.4, "preemptions": 0, "kv_cache_usage_peak": 0.07, "kv_cache_samples": 12, "counter_reset": false}
per_turn:
  description:
    - For a O(workload.kind=sessions) workload, each turn's figures over all the repeats of the first level (each level's are in
      RV(sweep)), shaped as RV(runs[].per_turn).
  returned: for sessions, when the benchmark ran
  type: list
  elements: dict
schedule_slip_ms:
  description:
    - For a O(workload.kind=replay), the send slip over all the repeats of the first level (each level's are in RV(sweep)),
      shaped as RV(runs[].schedule_slip_ms).
  returned: for a replay, when the benchmark ran
  type: dict
prefix_cache:
  description:
    - The server's prefix-cache lookups over all the repeats of the first level (each level's are in RV(sweep)), shaped as
      RV(runs[].prefix_cache); V(null) when a repeat has none.
  returned: when the benchmark ran
  type: dict
warmup:
  description:
    - The warmup phase (left out of every figure) with C(completed), C(failed), C(duration), C(total_output_tokens), C(failed_by_reason),
      C(errors), C(client_generation_tokens) and C(server_generation_tokens); V(null) without warmup requests or in check mode.
  returned: always
  type: dict
sweep:
  description:
    - One entry per level, in the order given (one entry without a sweep), each with C(concurrency) (V(null) for no limit), C(request_rate) (V(inf) for
      all at once), and C(metrics), C(runs) and C(warmup) shaped as the top-level keys of the same names, and the workload's
      figures over all the level's repeats, C(prefix_cache), and C(per_turn) (sessions) or C(schedule_slip_ms) (a replay),
      shaped as those of RV(runs).
    - The top-level RV(metrics), RV(runs) and RV(warmup) are those of the first entry, so a task written for one level reads the
      same keys with or without a sweep.
    - A level at which every warmup request failed has no runs and null figures, and the sweep goes on (a warning says so);
      without a sweep that fails the task. Empty in check mode.
  returned: always
  type: list
  elements: dict
  sample: [{"concurrency": 1, "request_rate": "inf", "metrics": {}, "runs": [], "warmup": null}]
knee:
  description:
    - For a sweep, where the decode rate per stream stops holding up. Going up from the lowest level (whatever the order given),
      C(level) is the last level whose C(value) (the median of C(decode_tok_s) in the level's C(metrics)) is within O(knee_tolerance) percent
      of C(reference_value) at C(reference_level), the lowest level; C(next_level) and C(next_value) are the first level that
      falls further (C(value) V(null) when it completed nothing), both V(null) when no level does (the sweep never saturated the
      server; add higher levels). C(level) is V(null) when the lowest level has no decode rate.
    - Also C(option) (V(concurrency) or V(request_rate)), C(tolerance_pct) and C(figure) (V(decode_tok_s)).
    - V(null) without a sweep.
  returned: always
  type: dict
  sample: {"option": "concurrency", "tolerance_pct": 10.0, "figure": "decode_tok_s", "reference_level": 1, "reference_value": 47.3,
           "level": 16, "value": 44.1, "next_level": 32, "next_value": 38.0}
metrics_url:
  description: Where the server's metrics were read; empty when O(metrics_url) is empty (nothing was read).
  returned: when the benchmark ran
  type: str
  sample: http://127.0.0.1:8000/metrics
notes:
  description: What the result leaves out on purpose, and why (for example no metrics read when O(metrics_url) is empty).
  returned: always
  type: list
  elements: str
save_result:
  description: The file written, when O(save_result) is set.
  returned: when O(save_result) is set and the benchmark ran
  type: str
  sample: /tmp/bench.json
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.headline import headline
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import Benchmark, BenchmarkFailed
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import DEFAULTS, ENDPOINTS, GOODPUT_KEYS, BenchSpec, SpecError, build_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import FORMATS, KINDS, OPTION_TYPES

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "url": {"type": "str", "default": DEFAULTS["url"]},
    "model": {"type": "str"},
    "endpoint": {"type": "str", "choices": list(ENDPOINTS)},
    "input_len": {"type": "int", "default": DEFAULTS["input_len"]},
    "output_len": {"type": "int", "default": DEFAULTS["output_len"]},
    "num_requests": {"type": "int"},
    "duration": {"type": "float"},
    "concurrency": {"type": "list", "elements": "int"},
    "request_rate": {"type": "list", "elements": "float"},
    "knee_tolerance": {"type": "float", "default": DEFAULTS["knee_tolerance"]},
    "percentiles": {"type": "list", "elements": "float", "default": DEFAULTS["percentiles"]},
    "goodput": {"type": "dict", "options": {key: {"type": "float"} for key in GOODPUT_KEYS}},
    "metrics_url": {"type": "str"},
    "warmup_requests": {"type": "int", "default": DEFAULTS["warmup_requests"]},
    "repeats": {"type": "int", "default": DEFAULTS["repeats"]},
    "timeout": {"type": "float", "default": DEFAULTS["timeout"]},
    "api_key": {"type": "str", "no_log": True},
    "seed": {"type": "int", "default": DEFAULTS["seed"]},
    "ignore_eos": {"type": "bool", "default": DEFAULTS["ignore_eos"]},
    "validate_certs": {"type": "bool", "default": DEFAULTS["validate_certs"]},
    "save_result": {"type": "path"},
    "workload": {"type": "dict", "options": {
        key: dict({"type": kind}, **({"choices": list(KINDS)} if key == "kind" else {"choices": list(FORMATS)} if key == "format" else {}))
        for key, kind in OPTION_TYPES.items()}},
}


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The options checked (build_spec), then the benchmark run (none in check mode)."""
    result: t.Dict[str, t.Any] = {"changed": False, "url": module.params["url"], "endpoint": module.params["endpoint"],
                                  "endpoint_fallback": None, "metrics": {}, "runs": [], "warmup": None, "sweep": [],
                                  "knee": None, "notes": [], "workload": None}
    try:
        spec = build_spec(module.params)
    except SpecError as exc:
        return failure(str(exc), **result)
    result.update(endpoint=spec.endpoint, workload=spec.workload.summary(spec.num_requests))
    if module.check_mode:
        return dict(result, msg="check mode: no request was sent to %s" % spec.url, headline=headline(spec, result)), [], False
    benchmark = Benchmark(spec)
    try:
        result.update(benchmark.run())
    except ServerError as exc:
        return failure(str(exc), **result)
    except BenchmarkFailed as exc:
        result.update(exc.result)
        return dict(result, msg=str(exc), headline=headline(spec, result)), list(benchmark.warnings), True
    result["msg"] = _summary(spec, result)
    result["headline"] = headline(spec, result)
    return result, list(benchmark.warnings), False


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


def _summary(spec: BenchSpec, result: t.Dict[str, t.Any]) -> str:
    size = "%d requests" % spec.num_requests if spec.duration is None else "%g s" % spec.duration + (
        " (at most %d requests)" % spec.num_requests if spec.num_requests else "")
    if spec.kind != "synthetic":
        size += " of a %s workload" % spec.kind
    if result.get("endpoint_fallback"):
        size += " through chat (no /v1/completions)"
    if not spec.sweep_option:
        median = (result["metrics"].get("decode_tok_s") or {}).get("median")
        return "%d repeat(s) of %s at %s: median decode %s tok/s per stream" % (
            spec.repeats, size, "concurrency %d" % spec.concurrency if spec.concurrency else "no concurrency limit",
            "%.2f" % median if median else "n/a")
    knee = result["knee"] or {}
    levels = ", ".join("%s %s" % (level[spec.sweep_option], "%.2f" % figure["median"] if figure and figure["median"] else "n/a")
                       for level, figure in ((level, level["metrics"].get("decode_tok_s")) for level in result["sweep"]))
    return "sweep of %s, %d repeat(s) of %s per level, median decode tok/s per stream: %s; knee at %s %s" % (
        spec.sweep_option, spec.repeats, size, levels, spec.sweep_option,
        knee.get("level") if knee.get("level") is not None else "n/a (no decode rate at the lowest level)")


if __name__ == "__main__":
    main()
