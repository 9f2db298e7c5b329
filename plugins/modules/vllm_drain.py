#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_drain
short_description: Wait, bounded, until a vLLM server has no request running
version_added: 0.2.0
description:
  - Reads the server's C(/metrics) (Prometheus text) every O(interval) seconds until C(vllm:num_requests_running) and
    C(vllm:num_requests_waiting) are both 0, or O(timeout) runs out.
  - Keeping new traffic away is the load balancer's job; this only waits for the requests in flight, and says how many it
    would cut when the bound is hit (RV(cut)).
  - A server that does not answer has nothing to drain (RV(answered=false)), which is not a failure.
  - Requests go straight to O(url) from the managed host, not through a proxy set in its environment.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Reads the metrics once and does not wait.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  url:
    description: Base URL of the server, for example V(http://127.0.0.1:8000).
    type: str
    required: true
  timeout:
    description: Seconds to wait at most.
    type: float
    default: 60
  interval:
    description: Seconds between two reads of C(/metrics).
    type: float
    default: 0.5
  fail_on_timeout:
    description: Fail, instead of reporting RV(cut), when requests are still running at the end.
    type: bool
    default: false
seealso:
  - module: gpuops.fleet.vllm_process
"""

EXAMPLES = r"""
- name: Let the requests in flight finish (at most two minutes) before a restart
  gpuops.fleet.vllm_drain:
    url: http://127.0.0.1:8000
    timeout: 120
  register: drained

- name: Say how many requests the restart cuts
  ansible.builtin.debug:
    msg: "{{ drained.cut }} request(s) still running after {{ drained.waited_s }} s"
"""

RETURN = r"""
answered:
  description: Whether the server's /metrics answered at all.
  returned: always
  type: bool
running_at_start:
  description: Requests running and waiting at the first read (null when the server did not answer).
  returned: always
  type: int
cut:
  description: Requests still running or waiting at the end (0 when drained); a restart now cuts them.
  returned: always
  type: int
drained:
  description: Whether the server reached 0 requests (or did not answer).
  returned: always
  type: bool
waited_s:
  description: Seconds waited.
  returned: always
  type: float
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between, failure, finish, http_url
from ansible_collections.gpuops.fleet.plugins.module_utils._server.answers import drain


ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "url": {"type": "str", "required": True},
    "timeout": {"type": "float", "default": 60},
    "interval": {"type": "float", "default": 0.5},
    "fail_on_timeout": {"type": "bool", "default": False},
}


def check_params(params: t.Mapping[str, t.Any]) -> str:
    """The server's base URL (no trailing slash), once every option is in range; raises SpecError naming option and value."""
    url = http_url("url", params["url"])
    between("timeout", params["timeout"], 0, 86400, "seconds")
    between("interval", params["interval"], 0.01, 60, "seconds")
    return url


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """The options checked, then the drain (one reading in check mode)."""
    params = module.params
    try:
        url = check_params(params)
    except SpecError as exc:
        return failure(str(exc))
    result = drain(url, params["timeout"], params["interval"], wait=not module.check_mode)
    result["changed"] = False
    if not result["cut"]:
        return result, [], False
    if module.check_mode:
        result["msg"] = "check mode: %d request(s) still in flight now; a real run waits up to %g s" % (result["cut"], params["timeout"])
        return result, [], False
    if params["fail_on_timeout"]:
        return result, [], True
    return result, [result["msg"] + ": a restart now cuts them"], False


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
