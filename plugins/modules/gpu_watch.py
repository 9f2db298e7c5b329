#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_watch
short_description: Install, keep or remove the metrics endpoint of a GPU host (a systemd service)
version_added: 0.2.0
description:
  - Installs the collection's metrics endpoint on the host as the systemd unit C(gpuops-watch.service), or removes it.
    The endpoint answers C(GET /metrics) in the Prometheus text format with one fresh reading of the host per scrape
    (GPU memory used and total, memory by holder class with each orphan's and foreign holder's PID and name, lost GPUs,
    and for each server of the role C(gpuops.fleet.vllm_server) whether it runs, answers C(/health) and generates).
    The metrics are listed in the collection's C(docs/watch.md); alert rules are in C(extensions/prometheus/).
  - The reading is C(gpuops.fleet.gpu_facts)' and the fleet report's, with the same code, which this module copies
    under O(dir) (the files of the collection's module_utils that the endpoint imports). It runs with O(python), the
    Python of the environment C(playbooks/prepare_hosts.yml) builds (nvidia-ml-py and psutil), and needs nothing else.
  - A second run with the same options changes nothing; the service is restarted only when its code or unit changed.
  - C(playbooks/watch_setup.yml) runs this module with its C(gpuops_watch_*) variables.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Nothing is written, started or removed; the task says whether it would change anything.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  state:
    description: V(present) installs the endpoint and keeps it running; V(absent) stops it and removes its unit and O(dir).
    type: str
    choices: [present, absent]
    default: present
  listen:
    description:
      - The address the endpoint listens on. The default, every address, lets Prometheus scrape from another host; give
        V(127.0.0.1) to keep it to this host (a local agent, or an SSH tunnel), or the address of the monitoring network.
    type: str
    default: 0.0.0.0
  port:
    description: The endpoint's TCP port (1 to 65535).
    type: int
    default: 9835
  interval:
    description:
      - Seconds between two generation checks of one server (5 to 3600). A scrape sooner than that reuses the last
        answer, so a server gets at most one short completion per interval, however often Prometheus scrapes.
    type: float
    default: 60
  host:
    description: The C(host) label of every series (the inventory name); the host's own name when not given.
    type: str
  state_dir:
    description: The role's records (its C(vllm_server_state_dir)).
    type: path
    default: /var/lib/gpuops-fleet/vllm
  generate_timeout:
    description: Seconds a generation check may take (more than 0, at most 120); keep it below Prometheus' C(scrape_timeout).
    type: float
    default: 10
  health_timeout:
    description: Seconds a C(/health) request may take (more than 0, at most 60).
    type: float
    default: 3
  python:
    description: The Python that runs the endpoint (the environment of C(playbooks/prepare_hosts.yml)).
    type: path
    default: /opt/gpuops-fleet/venv/bin/python
  dir:
    description: Where the endpoint's code is kept (under C(lib/)); removed with O(state=absent).
    type: path
    default: /opt/gpuops-fleet/watch
  environment:
    description: More environment for the endpoint (for example C(LD_LIBRARY_PATH) where C(libnvidia-ml.so.1) is off the loader path).
    type: dict
    default: {}
  systemd:
    description:
      - Manage the unit with systemctl (enable, start, restart when changed; stop and disable with O(state=absent)).
        V(false) writes the files only, for a host without systemd (the endpoint is then started some other way).
    type: bool
    default: true
  unit_dir:
    description: Where the unit file is written.
    type: path
    default: /etc/systemd/system
requirements:
  - systemd on the managed host (unless O(systemd=false)), and the environment of C(playbooks/prepare_hosts.yml).
seealso:
  - module: gpuops.fleet.gpu_facts
  - module: gpuops.fleet.gpu_report_facts
"""

EXAMPLES = r"""
- name: Install the metrics endpoint on port 9835, every address
  gpuops.fleet.gpu_watch:
    host: "{{ inventory_hostname }}"
  become: true

- name: Remove it
  gpuops.fleet.gpu_watch:
    state: absent
  become: true
"""

RETURN = r"""
unit:
  description: The unit file's path.
  returned: always
  type: str
url:
  description: Where the endpoint answers (with O(state=present)).
  returned: success
  type: str
argv:
  description: The endpoint's command line, as the unit runs it (with O(state=present)).
  returned: success
  type: list
  elements: str
files:
  description: The paths of the endpoint's code that were written or removed (relative to O(dir)'s C(lib/)).
  returned: success
  type: list
  elements: str
service:
  description: What was done to the service with systemctl (C(daemon_reload), C(enabled), C(started), C(restarted), C(stopped)).
  returned: success
  type: dict
option:
  description: The option whose value cannot be used, when the run failed for one.
  returned: failure
  type: str
"""

import argparse
import os
import socket
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_if_changed
from ansible_collections.gpuops.fleet.plugins.module_utils._server.unit import ALIVE_STATES, ENABLED_STATES, parse_show, show_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._watch import install
from ansible_collections.gpuops.fleet.plugins.module_utils._watch.serve import SettingsError, check

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "listen": {"type": "str", "default": "0.0.0.0"},
    "port": {"type": "int", "default": 9835},
    "interval": {"type": "float", "default": 60},
    "host": {"type": "str"},
    "state_dir": {"type": "path", "default": "/var/lib/gpuops-fleet/vllm"},
    "generate_timeout": {"type": "float", "default": 10},
    "health_timeout": {"type": "float", "default": 3},
    "python": {"type": "path", "default": install.DEFAULT_PYTHON},
    "dir": {"type": "path", "default": install.DEFAULT_DIR},
    "environment": {"type": "dict", "default": {}},
    "systemd": {"type": "bool", "default": True},
    "unit_dir": {"type": "path", "default": install.UNIT_DIR},
}

SETTINGS = ("listen", "port", "interval", "host", "state_dir", "generate_timeout", "health_timeout")


def _systemctl(module: AnsibleModule, *args: str) -> t.Tuple[int, str]:
    rc, out, err = module.run_command([module.get_bin_path("systemctl", required=True)] + list(args))
    return rc, (err or out).strip()


def _run_service(module: AnsibleModule, unit_changed: bool, code_changed: bool) -> t.Dict[str, bool]:
    """Enable the unit and have it run the current code: started when it does not run, restarted when anything changed."""
    done = {"daemon_reload": False, "enabled": False, "started": False, "restarted": False, "stopped": False}
    steps = []
    if unit_changed:
        steps.append(("daemon_reload", ["daemon-reload"]))
    rc, out, err = module.run_command(show_argv(module.get_bin_path("systemctl", required=True), install.UNIT_NAME))
    if rc != 0:
        raise install.InstallError("systemctl show %s failed (rc %d): %s" % (install.UNIT_NAME, rc, (err or out).strip()))
    props = parse_show(out)
    if props.get("UnitFileState", "") not in ENABLED_STATES:
        steps.append(("enabled", ["enable", install.UNIT_NAME]))
    if props.get("ActiveState", "") not in ALIVE_STATES:
        steps.append(("started", ["start", install.UNIT_NAME]))
    elif unit_changed or code_changed:
        steps.append(("restarted", ["restart", install.UNIT_NAME]))
    for key, args in steps:
        done[key] = True
        if module.check_mode:
            continue
        rc, said = _systemctl(module, *args)
        if rc != 0:
            raise install.InstallError("systemctl %s failed (rc %d): %s (journalctl -u %s shows why)"
                                       % (" ".join(args), rc, said or "no message", install.UNIT_NAME))
    return done


def present(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    params = module.params
    settings = {key: params[key] for key in SETTINGS}
    settings["host"] = settings["host"] or socket.gethostname()
    try:
        check(argparse.Namespace(**settings))
    except SettingsError as exc:
        return failure(str(exc), option=str(exc).split(":", 1)[0])
    unit = os.path.join(params["unit_dir"], install.UNIT_NAME)
    if not os.access(params["python"], os.X_OK):
        return failure("python: %s is not an executable Python here; run playbooks/prepare_hosts.yml first (or give the"
                       " environment's Python)" % params["python"], option="python")
    lib = os.path.join(params["dir"], "lib")
    try:
        text = install.unit_text(params["python"], lib, settings, params["environment"])
        argv = install.exec_argv(params["python"], settings)
    except install.InstallError as exc:
        return failure(str(exc), option=str(exc).split(":", 1)[0].split(".")[0])
    files = install.write_code(lib, install.sources(), module.check_mode)
    unit_changed = write_if_changed(unit, text, module.check_mode)
    service: t.Dict[str, bool] = {}
    if params["systemd"]:
        try:
            service = _run_service(module, unit_changed, bool(files))
        except install.InstallError as exc:
            return failure(str(exc), unit=unit)
    host = params["listen"] if ":" not in params["listen"] else "[%s]" % params["listen"]
    return {"changed": bool(files) or unit_changed or any(service.values()), "unit": unit, "argv": argv, "files": files,
            "service": service, "url": "http://%s:%d/metrics" % (host, params["port"])}, [], False


def absent(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    params = module.params
    unit = os.path.join(params["unit_dir"], install.UNIT_NAME)
    service = {"stopped": False, "daemon_reload": False}
    if params["systemd"] and os.path.exists(unit):
        service["stopped"] = True
        if not module.check_mode:
            rc, said = _systemctl(module, "disable", "--now", install.UNIT_NAME)
            if rc != 0:
                return failure("systemctl disable --now %s failed (rc %d): %s" % (install.UNIT_NAME, rc, said), unit=unit)
    removed = os.path.exists(unit)
    if removed and not module.check_mode:
        os.unlink(unit)
    if removed and params["systemd"]:
        service["daemon_reload"] = True
        if not module.check_mode:
            _systemctl(module, "daemon-reload")
    files = [params["dir"]] if install.remove_tree(params["dir"], module.check_mode) else []
    return {"changed": removed or bool(files), "unit": unit, "files": files, "service": service}, [], False


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = (present if module.params["state"] == "present" else absent)(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
