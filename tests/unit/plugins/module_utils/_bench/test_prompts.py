# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Request bodies (_bench/prompts): prompts differ per phase and repeat, from the seed."""

from __future__ import annotations

import json

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_bodies


def test_prompts_differ_per_phase_and_repeat_from_seed():
    a = request_bodies("completions", "m", 3, 50, 4, True, 7, "repeat1")
    assert a == request_bodies("completions", "m", 3, 50, 4, True, 7, "repeat1")
    assert len(set(a)) == 3
    b = request_bodies("completions", "m", 3, 50, 4, True, 7, "repeat2")
    c = request_bodies("completions", "m", 3, 50, 4, True, 8, "repeat1")
    assert not set(a) & set(b) and not set(a) & set(c)
    assert len(json.loads(a[0])["prompt"].split()) == 50
