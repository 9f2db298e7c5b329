# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module has one shape, read from its source (ast, no code run): DOCUMENTATION, EXAMPLES, RETURN, then its own
ARGUMENT_SPEC, then main(): the module made from ARGUMENT_SPEC, the run, and finish() as the one exit."""

from __future__ import annotations

import ast
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "plugins", "modules"))


ACTION_DIR = os.path.normpath(os.path.join(MODULES_DIR, "..", "action"))


def only_documentation(tree: ast.Module) -> bool:
    """A module that an action plugin implements on the controller holds its documentation and nothing else."""
    return all(isinstance(node, ast.Assign) or (isinstance(node, ast.ImportFrom) and node.module == "__future__")
               or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in tree.body)


def shape_violations(relpath: str, source: str) -> list:
    tree = ast.parse(source, relpath)
    found = []
    if only_documentation(tree):
        names = [target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)]
        if names != ["DOCUMENTATION", "EXAMPLES", "RETURN"]:
            found.append("%s: a documentation-only module holds DOCUMENTATION, EXAMPLES and RETURN, in that order: %s" % (relpath, names))
        if not os.path.exists(os.path.join(ACTION_DIR, os.path.basename(relpath))):
            found.append("%s: holds only documentation, but no action plugin of its name implements it" % relpath)
        return found
    assigned = [target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(target, ast.Name)]
    order = [name for name in assigned if name in ("DOCUMENTATION", "EXAMPLES", "RETURN", "ARGUMENT_SPEC")]
    if order != ["DOCUMENTATION", "EXAMPLES", "RETURN", "ARGUMENT_SPEC"]:
        found.append("%s: DOCUMENTATION, EXAMPLES, RETURN and ARGUMENT_SPEC are not all in the module, in that order: %s" % (relpath, order))
    imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    if "ARGUMENT_SPEC" in imported:
        found.append("%s: imports ARGUMENT_SPEC; it is written in the module, next to DOCUMENTATION" % relpath)
    exits = [node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("exit_json", "fail_json")]
    if exits:
        found.append("%s: calls %s; finish() is the one exit" % (relpath, ", ".join(exits)))
    mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
    if not mains:
        return found + ["%s: no main()" % relpath]
    calls = [node.func for node in ast.walk(mains[0]) if isinstance(node, ast.Call)]
    names = [func.id for func in calls if isinstance(func, ast.Name)]
    if names.count("finish") != 1:
        found.append("%s: main() calls finish() %d times, not once" % (relpath, names.count("finish")))
    made = [node for node in ast.walk(mains[0]) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "AnsibleModule"]
    if not made or not any(keyword.arg == "argument_spec" and isinstance(keyword.value, ast.Name) and keyword.value.id == "ARGUMENT_SPEC"
                           for keyword in made[0].keywords):
        found.append("%s: main() does not make its AnsibleModule from ARGUMENT_SPEC" % relpath)
    return found


def modules() -> list:
    return sorted(name for name in os.listdir(MODULES_DIR) if name.endswith(".py"))


def test_the_modules_are_where_the_test_looks():
    assert "gpu_facts.py" in modules() and "gpu_reclaim.py" in modules()


@pytest.mark.parametrize("name", modules())
def test_every_module_has_the_one_shape(name):
    with open(os.path.join(MODULES_DIR, name), encoding="utf-8") as handle:
        assert shape_violations(name, handle.read()) == []


GOOD = '''DOCUMENTATION = ""
EXAMPLES = ""
RETURN = ""
from x import finish
ARGUMENT_SPEC = {}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)
'''


@pytest.mark.parametrize("source, expected", [
    (GOOD.replace("from x import finish", "from x import finish, ARGUMENT_SPEC"), "imports ARGUMENT_SPEC"),
    (GOOD.replace("ARGUMENT_SPEC = {}\n", "ARGUMENT_SPEC_OF_X = {}\n"), "not all in the module"),
    (GOOD.replace("    result, warnings", "    if module.check_mode:\n        module.exit_json()\n    result, warnings"), "calls exit_json"),
    (GOOD.replace("    result, warnings", "    if failed:\n        finish(module, {}, [], True)\n    result, warnings"), "finish() 2 times"),
    (GOOD.replace("argument_spec=ARGUMENT_SPEC", "argument_spec={}"), "from ARGUMENT_SPEC"),
    (GOOD.replace('RETURN = ""\n', "").replace("ARGUMENT_SPEC = {}\n", 'ARGUMENT_SPEC = {}\nRETURN = ""\n'), "in that order"),
])
def test_the_shape_check_catches_a_module_out_of_shape(source, expected):
    """Canary: each synthetic module breaks the shape once, and that is reported."""
    found = shape_violations("x.py", source)
    assert len(found) == 1 and expected in found[0], found


def test_a_documentation_only_module_needs_its_action_plugin():
    source = 'from __future__ import annotations\nDOCUMENTATION = ""\nEXAMPLES = ""\nRETURN = ""\n'
    assert shape_violations("vllm_server_plan.py", source) == []
    assert "no action plugin" in shape_violations("no_such_action.py", source)[0]
    assert "in that order" in shape_violations("vllm_server_plan.py", 'DOCUMENTATION = ""\nRETURN = ""\n')[0]


def test_the_shape_check_lets_the_shape_pass():
    assert shape_violations("x.py", GOOD) == []
