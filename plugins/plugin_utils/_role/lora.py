# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The server's LoRA adapters (vllm_server_lora_adapters), on the controller: the list checked, and how the plan carries
it.

A server started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` set to ``True`` (or ``1``) in its
environment takes adapters at run time (POST /v1/load_lora_adapter, /v1/unload_lora_adapter): its adapters are then
*managed* (the reading compares the set it serves with the wanted one and a run changes only the difference, no restart),
and they are not part of the configuration hash. Every other server gets them as ``--lora-modules NAME=PATH ...`` at launch,
part of the hash: a change restarts it. A managed server is launched with them as ``--lora-modules`` too, so that a
restart for another reason serves them from its start.

Not managed, whatever the environment: a server across hosts (vllm_server_nodes_group; each host's reading is judged whole,
and a change restarts the group), and a server whose vllm_server_args carry their own ``--lora-modules``.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.values import mapping, text, to_json, words

VARIABLE = "vllm_server_lora_adapters"
FLAG = "--lora-modules"
ENABLE = "--enable-lora"
RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def problems(value: t.Any, operator_args: t.Any) -> t.List[str]:
    """What is wrong with vllm_server_lora_adapters (each message names the variable and the value); [] when usable."""
    if value is None or value == [] or value == "":
        return []
    shown = "%s=%s" % (VARIABLE, to_json(value))
    if not isinstance(value, (list, tuple)):
        return ["%s must be a list of {name, path}" % shown]
    found: t.List[str] = []
    names: t.List[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, t.Mapping) or set(item) - {"name", "path"}:
            found.append("%s: item %d must be a dict with the keys name and path only, got %s" % (shown, index, to_json(item)))
            continue
        name, path = text(item.get("name")).strip(), text(item.get("path")).strip()
        if not name or any(char.isspace() or char == "=" for char in name):
            found.append("%s: item %d needs a name without spaces or '=', got %s" % (shown, index, to_json(item.get("name"))))
        if not path:
            found.append("%s: item %d (%s) needs a non-empty path" % (shown, index, name or "no name"))
        if name in names:
            found.append("%s: the name %s is given twice" % (shown, to_json(name)))
        names.append(name)
    given = words(operator_args)
    if FLAG in given or any(word.startswith(FLAG + "=") for word in given):
        found.append("%s and %s in vllm_server_args: give the adapters in one of them" % (shown, FLAG))
    elif ENABLE not in given:
        found.append("%s needs %s in vllm_server_args (vLLM serves no adapter without it)" % (shown, ENABLE))
    return found


def adapters(value: t.Any) -> t.List[t.Dict[str, str]]:
    """The adapters as [{name, path}] (a checked value; anything else is no adapter)."""
    if not isinstance(value, (list, tuple)):
        return []
    return [{"name": text(item.get("name")).strip(), "path": text(item.get("path")).strip()}
            for item in value if isinstance(item, t.Mapping)]


def launch_words(wanted: t.Sequence[t.Mapping[str, str]]) -> t.List[str]:
    """``--lora-modules NAME=PATH ...`` (vLLM's syntax), nothing without adapters."""
    return [FLAG] + ["%s=%s" % (item["name"], item["path"]) for item in wanted] if wanted else []


def runtime_env(env: t.Mapping[str, t.Any]) -> bool:
    """VLLM_ALLOW_RUNTIME_LORA_UPDATING as vLLM reads it: 1 or true, any case."""
    return text(mapping(env).get(RUNTIME_ENV) or "0").strip().lower() in ("1", "true")


def managed(operator_args: t.Any, env: t.Mapping[str, t.Any], whole: bool) -> bool:
    """Whether the server's adapters change at run time (see the module's words)."""
    given = words(operator_args)
    return (not whole and ENABLE in given and runtime_env(env)
            and not (FLAG in given or any(word.startswith(FLAG + "=") for word in given)))


def hashed_argv(argv: t.Sequence[str], is_managed: bool) -> t.List[str]:
    """The argv that the configuration hash covers: a managed server's without its ``--lora-modules`` words."""
    if not is_managed or FLAG not in argv:
        return list(argv)
    start = list(argv).index(FLAG)
    end = start + 1
    while end < len(argv) and not str(argv[end]).startswith("-"):
        end += 1
    return list(argv[:start]) + list(argv[end:])


def status_option(wanted: t.List[t.Dict[str, str]], url: str, key: str, timeout: float,
                  result: t.Mapping[str, t.Any], lock: str) -> t.Dict[str, t.Any]:
    """The reading's ``adapters`` option (_server.adapters.ADAPTER_OPTIONS) of a managed server: the reading changes them
    under the server's lock file ``lock`` when only they differ."""
    return {"wanted": wanted, "url": url, "api_key": key or None, "timeout": timeout, "result": dict(result),
            "lock": {"path": lock}}
