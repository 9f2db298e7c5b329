# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the role may take over the server on the port (_reclaim/takeover.refusal), by how it was started."""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host import listener as L
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import refusal


def info(how: str, vllm: bool = True, **extra: t.Any) -> t.Dict[str, t.Any]:
    base = {"pid": 5000, "command": "vllm serve m --api-key ********", "started": "somehow", "vllm": vllm, "how": how,
            "unit": None, "container": None}
    base.update(extra)
    return base


def test_refusals_name_the_process_and_the_way_out():
    web = refusal(info(L.BY_HAND_SHELL, vllm=False, command="nginx: master process"), 8000)
    assert "PID 5000 (nginx: master process)" in web and "not a vLLM server" in web and "vllm_server_port" in web
    docker = refusal(info(L.CONTAINER, container="docker 4f1c2a9e8b7d"), 8000)
    assert "docker 4f1c2a9e8b7d" in docker and "container" in docker
    unit = refusal(info(L.UNIT, unit="vllm-old.service"), 8000)
    assert "vllm-old.service" in unit and "vllm_server_takeover_units=true" in unit
    assert refusal(info(L.UNIT, unit="vllm-old.service"), 8000, stop_units=True) is None
    for how in (L.BY_HAND_TMUX, L.BY_HAND_SCREEN, L.BY_HAND_SHELL, L.NOHUP, L.PARENT):
        assert refusal(info(how), 8000) is None
