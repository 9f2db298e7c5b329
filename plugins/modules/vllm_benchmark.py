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
  - Reads the server's C(vllm:generation_tokens_total) from C(/metrics) before and after each phase and reports its count next to the
    client's; a difference is a warning.
  - Uses only the Python standard library (asyncio over plain sockets, TLS for https); one core reads tens of thousands of tokens a
    second with accurate timing. Runs on the GPU host or anywhere that reaches the server (for example with C(delegate_to)).
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
      - Model name to ask for. It must be one the server lists at V(/v1/models).
      - Omit it to use the first model the server lists.
    type: str
  endpoint:
    description: Which API to call.
    type: str
    choices: [completions, chat]
    default: completions
  input_len:
    description:
      - Prompt length in words (short common English words, most of them one token; the server's count of prompt tokens is what
        RV(runs[].total_input_tokens) reports).
    type: int
    default: 1024
  output_len:
    description:
      - Tokens to generate per request (C(max_tokens)). With O(ignore_eos=true) every request decodes exactly this many.
    type: int
    default: 128
  num_requests:
    description:
      - Requests per repeat (C(--num-prompts) of vllm bench serve).
      - The default, 64, is for a measurement on its own; the role gpuops.fleet.vllm_server sends 32 per repeat by default
        (C(vllm_server_benchmark_num_requests)), because its benchmark runs right after a restart, once per configuration and
        round in C(benchmark_matrix.yml), where many short measurements say more than a few long ones.
    type: int
    default: 64
  concurrency:
    description: Most requests in flight at once (C(--max-concurrency)).
    type: int
    default: 8
  request_rate:
    description:
      - Mean arrival rate in requests per second; arrivals follow a Poisson process (exponential gaps), as C(--request-rate) with
        burstiness 1.
      - Omit it to send every request at once (limited by O(concurrency)), vllm bench serve's default (V(inf)).
    type: float
  warmup_requests:
    description: Requests sent before the first repeat and left out of every figure (at most O(concurrency) at a time).
    type: int
    default: 4
  repeats:
    description:
      - How many times the O(num_requests) requests are run. RV(metrics) gives each figure's median across the repeats with its
        min and max, and from 3 repeats on a 95% confidence interval of the mean (Student t).
      - Each repeat draws different prompts, so the server's prefix cache cannot make a later repeat look faster.
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
  save_result:
    description:
      - Also write the figures to this file (on the host the task runs on) in the JSON shape of C(vllm bench serve --save-result).
        With one repeat the file is one JSON object; with several, one object per repeat, one per line (as C(--append-result)
        writes them). What vllm bench serve does not have is under the key C(gpuops_fleet).
      - The file is output, not server state; it does not make the task changed.
    type: path
notes:
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
"""

RETURN = r"""
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
  description: The API that was called.
  returned: always
  type: str
  sample: completions
metrics:
  description:
    - Each headline figure across the repeats that completed at least one request, as a dict of C(median) (the figure to quote), C(min),
      C(max), C(mean), C(stdev) (sample standard deviation), C(n) (repeats) and C(ci95) (V([low, high]), the 95% confidence interval
      of the mean by Student t, from 3 repeats on; else V(null)).
    - Figures are C(decode_tok_s), C(completed), C(failed), C(duration), C(request_throughput), C(output_throughput),
      C(total_token_throughput), C(total_input_tokens), C(total_output_tokens), and for C(ttft), C(tpot), C(itl) and C(e2el) each
      of C(mean_*_ms), C(median_*_ms), C(std_*_ms), C(p90_*_ms), C(p99_*_ms).
    - A figure that no repeat has (C(decode_tok_s) when no request generated two tokens) is V(null), never a zero.
    - Empty in check mode.
  returned: always
  type: dict
  sample: {"decode_tok_s": {"median": 47.3, "min": 47.2, "max": 47.4, "mean": 47.3, "stdev": 0.1, "n": 3, "ci95": [47.05, 47.55]}}
runs:
  description: Each repeat's figures, in order. Empty in check mode.
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
    median_tpot_ms:
      description:
        - Median over the requests of (E2EL - TTFT) / (output tokens - 1). Likewise C(mean_*), C(std_*), C(p90_*) and C(p99_*) of
          C(ttft), C(tpot), C(itl) and C(e2el), all in milliseconds.
      type: float
      returned: always
    approximate_token_count:
      description: True when the server sent no usage for some completed request, whose tokens were then counted as content chunks.
      type: bool
      returned: always
    client_generation_tokens:
      description: Tokens the client saw generated in this repeat, failed requests included.
      type: int
      returned: always
    server_generation_tokens:
      description:
        - The increase of the server's C(vllm:generation_tokens_total) for the model over this repeat; V(null) when the server has no
          such counter. A difference from RV(runs[].client_generation_tokens) comes with a warning.
      type: float
      returned: always
warmup:
  description:
    - The warmup phase (left out of every figure) with C(completed), C(failed), C(duration), C(total_output_tokens), C(failed_by_reason),
      C(errors), C(client_generation_tokens) and C(server_generation_tokens); V(null) without warmup requests or in check mode.
  returned: always
  type: dict
save_result:
  description: The file written, when O(save_result) is set.
  returned: when O(save_result) is set and the benchmark ran
  type: str
  sample: /tmp/bench.json
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import Benchmark, BenchmarkFailed
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import ARGUMENT_SPEC, SpecError, build_spec


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result: t.Dict[str, t.Any] = {"changed": False, "url": module.params["url"], "endpoint": module.params["endpoint"],
                                  "metrics": {}, "runs": [], "warmup": None}
    try:
        spec = build_spec(module.params)
    except SpecError as exc:
        module.fail_json(msg=str(exc), **result)
    if module.check_mode:
        module.exit_json(msg="check mode: no request was sent to %s" % spec.url, **result)
    benchmark = Benchmark(spec)
    try:
        result.update(benchmark.run())
    except ServerError as exc:
        module.fail_json(msg=str(exc), **result)
    except BenchmarkFailed as exc:
        result.update(exc.result)
        for warning in benchmark.warnings:
            module.warn(warning)
        module.fail_json(msg=str(exc), **result)
    for warning in benchmark.warnings:
        module.warn(warning)
    median = (result["metrics"].get("decode_tok_s") or {}).get("median")
    result["msg"] = "%d repeat(s) of %d requests at concurrency %d: median decode %s tok/s per stream" % (
        spec.repeats, spec.num_requests, spec.concurrency, "%.2f" % median if median else "n/a")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
