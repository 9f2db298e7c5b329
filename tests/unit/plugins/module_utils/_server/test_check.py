# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launch check's reading of a server's environment: secret values are compared but only named, never shown."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server import check as _server_check

TOKEN = "hf_secret123"


class Proc:
    pid = 4242

    def __init__(self, environ):
        self._environ = environ

    def environ(self):
        return self._environ


class NoPsutil:
    Error = OSError


@pytest.mark.parametrize("actual, ok, shown", [
    ({"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL", "PAT": "p"}, True,
     "PID 4242 runs with HF_TOKEN (secret, as configured), NCCL_PROTO=LL, PAT (secret, as configured)"),
    ({"HF_TOKEN": "hf_other999", "NCCL_PROTO": "LL", "PAT": "p"}, False,
     "PID 4242 runs with HF_TOKEN differs from its configured secret value"),
    ({"NCCL_PROTO": "LL128", "PAT": "q"}, False,
     "PID 4242 runs with HF_TOKEN is not set (expected a secret value); NCCL_PROTO='LL128' (expected 'LL');"
     " PAT differs from its configured secret value"),
])
def test_environment_check_compares_secrets_but_names_them_only(actual, ok, shown):
    check = _server_check._environment_check(NoPsutil, Proc(actual), {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL", "PAT": "p"}, ["PAT"])
    assert check.ok is ok and check.detail == shown
    assert TOKEN not in check.detail and "hf_other999" not in check.detail and "'p'" not in check.detail
