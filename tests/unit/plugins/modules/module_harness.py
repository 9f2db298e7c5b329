# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One way for unit tests to run a module's main() as Ansible would, and read what it returns (run_printed: what it
prints, through Ansible's own exit_json and fail_json); and one way to check that a module documents the options of
its argument spec.

exit_json and fail_json end the run with ``Exit``; the result always carries ``failed`` (True or False) and
``warnings``: the warnings that run gave through ``module.warn``, on success and on failure alike (Ansible shows
both). What a module returns must be strict JSON (no NaN or infinity), as a controller parses it.
"""

from __future__ import annotations

import json
import time
import typing as t

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

_WARNINGS = "_harness_warnings"


class Exit(Exception):
    """A module's run ended: ``result`` is what it returned."""

    def __init__(self, result: t.Dict[str, t.Any]) -> None:
        super().__init__(result)
        self.result = result


def _warnings(module: basic.AnsibleModule) -> t.List[str]:
    return module.__dict__.setdefault(_WARNINGS, [])


def capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Patch AnsibleModule so that exit_json/fail_json raise Exit and each run keeps its own warnings."""

    def exit_json(self, **result):
        raise Exit(dict(result, failed=bool(result.get("failed", False)), warnings=list(_warnings(self))))

    def fail_json(self, msg, **result):
        raise Exit(dict(result, failed=True, msg=msg, warnings=list(_warnings(self))))

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning: _warnings(self).append(warning))


def call_main(module: t.Any, args: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """Run ``module.main()`` with ``args`` (capture() must be in place) and return its result."""
    with patch_module_args(dict(args)):
        with pytest.raises(Exit) as caught:
            module.main()
    json.dumps(caught.value.result, allow_nan=False)  # what the module returns must be strict JSON
    return caught.value.result


def run_module(module: t.Any, args: t.Mapping[str, t.Any], monkeypatch: pytest.MonkeyPatch) -> t.Dict[str, t.Any]:
    """capture() and call_main() in one step."""
    capture(monkeypatch)
    return call_main(module, args)


def run_printed(module: t.Any, args: t.Mapping[str, t.Any], capsys: pytest.CaptureFixture) -> t.Tuple[t.Dict[str, t.Any], str]:
    """Run ``module.main()`` with Ansible's own exit_json/fail_json (no capture()): the JSON it printed, and its text."""
    with patch_module_args(dict(args)):
        with pytest.raises(SystemExit):
            module.main()
    text = capsys.readouterr().out
    return json.loads(text), text


def documented_options(documentation: str, *fragments: str) -> t.Dict[str, t.Any]:
    """The options a module documents: those of its DOCUMENTATION and of its doc fragments (each fragment's YAML),
    merged as Ansible merges them (an option's keys from a fragment, then the module's own)."""
    options: t.Dict[str, t.Any] = {}
    for text in fragments + (documentation,):
        for name, option in (yaml.safe_load(text).get("options") or {}).items():
            options[name] = dict(options.get(name, {}), **option)
    return options


def assert_documented_as_specified(options: t.Mapping[str, t.Any], spec: t.Mapping[str, t.Mapping[str, t.Any]],
                                   keys: t.Sequence[str] = ("type", "elements", "default")) -> None:
    """``options`` (documented_options()) are exactly those of ``spec`` (an ARGUMENT_SPEC), each with its ``keys`` as
    the spec has them, and so are the suboptions of each option that has some."""
    assert set(options) == set(spec)
    for name, option in spec.items():
        assert [options[name].get(key) for key in keys] == [option.get(key) for key in keys], name
        if option.get("options") is not None:
            assert_documented_as_specified(options[name].get("suboptions") or {}, option["options"], keys)


def environ_of(pid: int, timeout: float = 10.0) -> t.List[bytes]:
    """The entries of /proc/PID/environ once the kernel shows them. Popen returns as soon as exec() closes the child's
    close-on-exec descriptors, before the new image's environment is in place; until then the file reads empty."""
    deadline = time.monotonic() + timeout
    while True:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            data = handle.read()
        if data or time.monotonic() >= deadline:
            return data.split(b"\0")
        time.sleep(0.01)
