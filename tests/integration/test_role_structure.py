# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role reads as its steps: read from its files, not from a run.

main.yml lists the steps in order; no include names a file by an expression; includes nest at most 3 deep; the lock is
taken and released in one block; the role keeps at most 30 internal names and 8 set_fact tasks.
"""

from __future__ import annotations

import re
import typing as t
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "vllm_server"
TASKS = ROLE / "tasks"
INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks")


def _tasks(items: t.Iterable[t.Mapping[str, t.Any]]) -> t.Iterator[t.Mapping[str, t.Any]]:
    for task in items or []:
        yield task
        for part in ("block", "rescue", "always"):
            yield from _tasks(task.get(part))


def _file_tasks(name: str) -> t.List[t.Mapping[str, t.Any]]:
    return list(_tasks(yaml.safe_load((TASKS / name).read_text())))


def _included(task: t.Mapping[str, t.Any]) -> t.Optional[str]:
    for key in INCLUDES:
        if key in task:
            value = task[key]
            return value["file"] if isinstance(value, dict) else value
    return None


def _depth(name: str, seen: t.Tuple[str, ...] = ()) -> int:
    children = [_included(task) for task in _file_tasks(name)]
    nested = [_depth(child, seen + (name,)) for child in children if child and child not in seen]
    return 1 + max(nested, default=0)


def test_no_include_names_its_file_by_an_expression():
    computed = [(path.name, _included(task)) for path in sorted(TASKS.glob("*.yml")) for task in _file_tasks(path.name)
                if _included(task) and "{{" in _included(task)]
    assert not computed, computed


def test_includes_nest_at_most_three_deep():
    depths = {path.name: _depth(path.name) for path in TASKS.glob("*.yml")}
    assert max(depths.values()) <= 3, depths


def test_main_lists_the_steps_in_order():
    text = (TASKS / "main.yml").read_text()
    text = text[text.index("\n- name:"):]  # the tasks, not the comment above them
    steps = ["plan.yml", "Read what runs now", "Leave the running server alone", "gpuops.fleet.vllm_lock:", "_preflight.yml",
             "_stop.yml", "_verify.yml", "_launch.yml", "_ready.yml", "Release the server's lock", "Sum up this host"]
    where = [text.find(step) for step in steps]
    assert -1 not in where, dict(zip(steps, where))
    assert where == sorted(where), dict(zip(steps, where))


def test_the_lock_is_taken_and_released_in_one_block():
    locks = [(path.name, task) for path in sorted(TASKS.glob("*.yml")) for task in _file_tasks(path.name)
             if "gpuops.fleet.vllm_lock" in task]
    assert [name for name, _task in locks] == ["main.yml", "main.yml"], locks
    (block,) = [task for task in _file_tasks("main.yml") if "always" in task]
    assert "gpuops.fleet.vllm_lock" in block["block"][0]
    assert block["always"][0]["gpuops.fleet.vllm_lock"]["state"] == "unlocked"
    # the lock file's name is written once, by the plan; the role's YAML reads it from there
    text = "".join(path.read_text() for path in (ROLE / "tasks").glob("*.yml"))
    assert ".lock\"" not in text and ".lock'" not in text, "the role's tasks name the lock file themselves"
    plan = (ROLE.parents[1] / "plugins" / "plugin_utils" / "_role" / "plan.py").read_text()
    assert plan.count('.lock"') == 1, "the lock file is named more than once"


def test_internal_names_and_set_facts_stay_few():
    text = "".join(path.read_text() for path in ROLE.rglob("*.yml")) + "".join(path.read_text() for path in ROLE.rglob("*.j2"))
    names = sorted(set(re.findall(r"\b__vllm_server_[a-z_]+", text)))
    assert len(names) <= 30, names
    set_facts = [task for path in TASKS.glob("*.yml") for task in _file_tasks(path.name) if "ansible.builtin.set_fact" in task]
    assert len(set_facts) <= 8, [task.get("name") for task in set_facts]


def test_the_role_s_yaml_orders_steps_and_computes_no_verdict():
    """Decisions live in Python (gpuops.fleet.vllm_server_plan, vllm_server_verdict): vars/main.yml only names results (no
    Jinja block, at most 40 lines), and the role's tasks and vars carry at most 20 default() calls."""
    variables = (ROLE / "vars" / "main.yml").read_text()
    assert "{%" not in variables and len(variables.splitlines()) <= 40, variables
    yaml_files = sorted(TASKS.glob("*.yml")) + [ROLE / "vars" / "main.yml"]
    defaults = {path.name: path.read_text().count("default(") for path in yaml_files}
    assert sum(defaults.values()) <= 20, defaults
    blocks = [path.name for path in yaml_files if "{%" in path.read_text()]
    assert not blocks, "Jinja blocks (a decision) in %s" % blocks


PLAYBOOKS = ROLE.parents[1] / "playbooks"


def _uses_of_private_names(path: Path) -> t.List[str]:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(r"\b__vllm_server_", line) or re.search(r"tasks_from:\s*['\"]?_", line):
            found.append("%s:%d: %s" % (path.name, number, line.strip()))
    return found


def test_playbooks_use_only_the_role_s_documented_entry_points_and_variables():
    """The role's private names (__vllm_server_*, tasks_from: _x.yml) are its own; a playbook uses its entry points
    (meta/argument_specs.yml) and its documented facts (vllm_server_plan, vllm_server_result, vllm_server_failure, ...)."""
    outside = [path for path in sorted(PLAYBOOKS.rglob("*")) if path.suffix in (".yml", ".yaml", ".j2")]
    assert outside, "no playbook found under %s" % PLAYBOOKS
    found = [use for path in outside for use in _uses_of_private_names(path)]
    assert not found, found
    entry_points = set(yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"])
    named = {match for path in outside for match in re.findall(r"tasks_from:\s*['\"]?([A-Za-z0-9_.]+)", path.read_text())}
    assert {name.replace(".yml", "") for name in named} <= entry_points, (named, entry_points)


def test_the_private_name_check_catches_a_playbook_reaching_in(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("- ansible.builtin.include_role:\n    name: gpuops.fleet.vllm_server\n    tasks_from: _variables.yml\n"
                   "- ansible.builtin.debug:\n    msg: '{{ __vllm_server_config_hash }}'\n")
    assert len(_uses_of_private_names(bad)) == 2


def _descriptions(node: t.Any) -> t.Iterator[str]:
    """Every description of the argument spec, one sentence list item at a time."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "short_description"):
                yield from ([value] if isinstance(value, str) else [str(item) for item in value])
            else:
                yield from _descriptions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _descriptions(item)


def test_the_argument_spec_says_what_the_code_does_with_a_server_in_a_container():
    """The code takes a vLLM server in a docker or podman container on the port over (only a Kubernetes pod's, or one whose
    runtime cannot be asked, is refused): the argument spec must say taken over, never that such a server is always
    refused (issue 34)."""
    from ansible_collections.gpuops.fleet.plugins.module_utils._host import listener
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.takeover import refusal

    by_hand = {"pid": 4242, "command": "vllm serve m", "started": "in a container", "vllm": True, "how": listener.CONTAINER,
               "unit": None, "container": {"runtime": "podman", "id": "a" * 64, "name": "by-hand"}}
    assert refusal(by_hand, 8000) is None, "the code no longer takes a container's server over: change the argument spec too"
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    texts = [" ".join(text.split()) for text in _descriptions(specs)]
    about = [text for text in texts if "container" in text and ("taken over" in text or "refused" in text)]
    assert any("in a container" in text and "taken over" in text for text in about), about
    assert not [text for text in about if "always refused" in text], about
    takeover = " ".join(_descriptions(specs["main"]["options"]["vllm_server_takeover_units"]))
    assert "container" in takeover and "taken over" in " ".join(takeover.split()), takeover


def test_the_launch_and_ready_entry_points_name_the_container_mode_and_the_generation_check():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    for entry in ("launch", "ready"):
        text = " ".join(" ".join(specs[entry]["description"]).split())
        assert "container" in text and "generation check" in text, (entry, text)
    main = " ".join(" ".join(specs["main"]["description"]).split())
    assert "judges the reclaim's own last reading" in main, main
