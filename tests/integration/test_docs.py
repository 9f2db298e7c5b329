# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Docs that cannot rot: what README.md, docs/*.md and examples/ show an operator is read by the tools that would read it.

- every ```yaml block parses (no duplicate key), unless EXCEPTIONS names it with a reason;
- a yaml block that shows a file of examples/ (its first line `# examples/PATH`, optionally `(abridged)`) says nothing
  that file does not say;
- every `ansible-playbook` command (in a fenced block, or an inline code span) passes the real `ansible-playbook
  --syntax-check` with the example inventory in place of its own; FQCN playbooks resolve through this checkout's
  collection path. One run per distinct set of options, each with all the playbooks that set is used with;
- the README, the docs and the role's argument spec say the same of a server in a container on the port: taken over,
  not "always refused";
- a deprecated name appears only where it is called deprecated;
- CI (.ci/run) runs the test command the README gives.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import typing as t
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import basic

from ansible_run import ansible_env, BIN, REPO

EXAMPLES = REPO / "examples"
EXAMPLE_INVENTORY = EXAMPLES / "inventory.yml"
VAULT_PASSWORD = EXAMPLES / "demo-vault-password.txt"
ARGUMENT_SPECS = REPO / "roles" / "vllm_server" / "meta" / "argument_specs.yml"

# (file, the block's first line) -> why that yaml block may not parse; empty: every block parses
EXCEPTIONS: t.Dict[t.Tuple[str, str], str] = {}

# names replaced in 0.3.0, accepted with a warning until 0.3.0: a line of the docs that names one says it is deprecated
DEPRECATED = ("vllm_restart_become", "gpu_cleanup_become", "vllm_benchmark_become", "vllm_rollout_become",
              "gpuops_fleet_prepare_become", "vllm_server_memory_threshold_mib", "gpu_reclaim_memory_threshold_mib",
              "gpu_report_threshold_mib", "gpu_facts_idle_mib", "vllm_server_force_restart", "vllm_restart_force",
              "vllm_server_verify_launch")

# ansible-playbook options that take a value (the others are flags)
WITH_VALUE = {"-i", "--inventory", "--inventory-file", "-e", "--extra-vars", "-l", "--limit", "-t", "--tags", "--skip-tags",
              "--vault-password-file", "--vault-pass-file", "--vault-id", "-u", "--user", "-f", "--forks", "--become-user",
              "--become-method", "-c", "--connection", "--start-at-task", "-M", "--module-path", "-T", "--timeout",
              "--private-key", "--key-file"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
INLINE = re.compile(r"`(ansible-playbook [^`]+)`")


def markdown_files() -> t.List[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")) + sorted(EXAMPLES.glob("**/*.md"))


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def blocks(path: Path) -> t.Iterator[t.Tuple[str, str, int]]:
    """(language, text, line number of the opening fence) of each fenced block."""
    text = path.read_text(encoding="utf-8")
    for found in FENCE.finditer(text):
        yield found.group(1).lower(), found.group(2), text.count("\n", 0, found.start()) + 1


class DocsLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """Safe YAML with Ansible's tags (!vault, !unsafe) as tagged values, refusing a key given twice."""

    def construct_mapping(self, node, deep=False):
        # the keys the mapping itself gives (a merge key, <<: *anchor, brings others that its own may override)
        keys = [self.construct_object(key, deep=True) for key, _value in node.value if key.tag != "tag:yaml.org,2002:merge"]
        twice = sorted({str(key) for key in keys if keys.count(key) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(None, None, "key(s) given twice: %s" % ", ".join(twice), node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _tagged(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> t.Tuple[str, str]:
    return ("!" + tag_suffix, loader.construct_scalar(node))  # type: ignore[arg-type]


DocsLoader.add_multi_constructor("!", _tagged)


def load_yaml(text: str) -> t.Any:
    return yaml.load(text, Loader=DocsLoader)  # nosec: DocsLoader is a SafeLoader


def yaml_blocks() -> t.List[t.Tuple[Path, str, int]]:
    return [(path, text, line) for path in markdown_files() for lang, text, line in blocks(path) if lang in ("yaml", "yml")]


def test_every_yaml_block_parses() -> None:
    found = yaml_blocks()
    assert found, "no yaml block found: the extraction is broken"
    problems = []
    for path, text, line in found:
        first = text.splitlines()[0] if text.strip() else ""
        if (rel(path), first) in EXCEPTIONS:
            continue
        try:
            load_yaml(text)
        except yaml.YAMLError as error:
            problems.append("%s:%d: %s" % (rel(path), line, error))
    assert not problems, "\n".join(problems)
    stale = [key for key in EXCEPTIONS if not any(rel(p) == key[0] and text.splitlines()[0] == key[1] for p, text, _line in found)]
    assert not stale, "exceptions for blocks that no longer exist: %s" % stale


def contained(shown: t.Any, actual: t.Any, where: str) -> t.List[str]:
    """What ``shown`` says that ``actual`` does not: a dict may leave keys out, anything else must be equal."""
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return ["%s: shown as a mapping, the file has %r" % (where, actual)]
        problems = []
        for key, value in shown.items():
            if key not in actual:
                problems.append("%s.%s: not in the file" % (where, key))
            else:
                problems += contained(value, actual[key], "%s.%s" % (where, key))
        return problems
    return [] if shown == actual else ["%s: shown %r, the file has %r" % (where, shown, actual)]


def test_blocks_that_show_an_example_file_agree_with_it() -> None:
    shown = 0
    problems = []
    for path, text, line in yaml_blocks():
        named = re.match(r"#\s*(examples/\S+)", text)
        if not named:
            continue
        shown += 1
        target = REPO / named.group(1)
        if not target.is_file():
            problems.append("%s:%d names %s, which does not exist" % (rel(path), line, named.group(1)))
            continue
        problems += ["%s:%d: %s" % (rel(path), line, p) for p in contained(load_yaml(text), load_yaml(target.read_text()), named.group(1))]
    assert shown >= 2, "the README shows the example's inventory and group_vars"
    assert not problems, "\n".join(problems)


def test_the_example_files_parse_and_the_vault_opens() -> None:
    for path in sorted(EXAMPLES.rglob("*.yml")):
        if path.read_text().startswith("$ANSIBLE_VAULT;"):
            done = subprocess.run([str(BIN / "ansible-vault"), "view", "--vault-password-file", str(VAULT_PASSWORD), str(path)],
                                  capture_output=True, text=True, timeout=60, check=False, env=ansible_env())
            assert done.returncode == 0, done.stderr
            assert isinstance(load_yaml(done.stdout), dict), path
        else:
            assert isinstance(load_yaml(path.read_text()), dict), path


# ---- ansible-playbook commands


def commands(path: Path) -> t.List[t.Tuple[int, str]]:
    """(line, command text) of every ansible-playbook command: lines of a non-yaml fenced block (continuations joined),
    and inline code spans."""
    found = []
    text = path.read_text(encoding="utf-8")
    for lang, body, line in blocks(path):
        if lang in ("yaml", "yml"):
            continue
        joined = re.sub(r"\\\n\s*", " ", body)
        for offset, command in enumerate(joined.splitlines()):
            command = re.sub(r"^\s*(\$\s+)?", "", command)
            if command.startswith("ansible-playbook "):
                found.append((line + 1 + offset, command))
    for span in INLINE.finditer(" ".join(text.split())):
        found.append((0, span.group(1)))
    return found


def parse(command: str) -> t.Tuple[t.Tuple[str, ...], t.List[str]]:
    """(the options but the inventory, the playbooks) of one command line; a shell comment ends it."""
    words = shlex.split(command, comments=True)
    assert words[0] == "ansible-playbook"
    options: t.List[str] = []
    playbooks: t.List[str] = []
    rest = iter(words[1:])
    for word in rest:
        option = word.split("=", 1)[0]
        if word.startswith("-") and option in WITH_VALUE and "=" not in word:
            value = next(rest, None)
            assert value is not None, "%s has no value in: %s" % (word, command)
            if option not in ("-i", "--inventory", "--inventory-file"):
                options += [word, value]
        elif word.startswith("-"):
            if option not in ("-i", "--inventory", "--inventory-file"):
                options.append(word)
        else:
            playbooks.append(word)
    return tuple(options), playbooks


def all_commands() -> t.Dict[t.Tuple[str, ...], t.Dict[str, t.List[str]]]:
    """options -> playbook -> where it is shown."""
    grouped: t.Dict[t.Tuple[str, ...], t.Dict[str, t.List[str]]] = {}
    for path in markdown_files():
        for line, command in commands(path):
            options, playbooks = parse(command)
            assert playbooks, "%s:%d: no playbook in: %s" % (rel(path), line, command)
            for playbook in playbooks:
                grouped.setdefault(options, {}).setdefault(playbook, []).append("%s:%d" % (rel(path), line))
    return grouped


def test_every_ansible_playbook_command_passes_syntax_check() -> None:
    grouped = all_commands()
    playbooks = {playbook for by_playbook in grouped.values() for playbook in by_playbook}
    assert {"gpuops.fleet.prepare_hosts", "gpuops.fleet.gpu_facts", "gpuops.fleet.restart_vllm"} <= playbooks, playbooks
    env = ansible_env(ANSIBLE_VAULT_PASSWORD_FILE=str(VAULT_PASSWORD))
    problems = []
    for options, by_playbook in sorted(grouped.items()):
        argv = [str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(EXAMPLE_INVENTORY), *options, *sorted(by_playbook)]
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            shown = "; ".join("%s (%s)" % (p, ", ".join(w)) for p, w in sorted(by_playbook.items()))
            problems.append("%s\n  shown at: %s\n%s%s" % (shlex.join(argv), shown, done.stdout[-1500:], done.stderr[-1500:]))
    assert not problems, "\n\n".join(problems)


def test_operator_docs_name_playbooks_by_fqcn() -> None:
    """README.md's commands work from any directory: FQCN playbooks, never paths into a checkout."""
    paths = [command for _line, command in commands(REPO / "README.md") if re.search(r"\bplaybooks/\S+\.ya?ml", command)]
    assert not paths, paths
    text = (REPO / "README.md").read_text()
    assert not re.search(r"(?<![\w/])playbooks/\w+\.ya?ml", text), re.findall(r"(?<![\w/])playbooks/\w+\.ya?ml", text)


# ---- what the docs and the argument spec say


def sentences(text: str) -> t.List[str]:
    flat = " ".join(text.split())
    return [s for s in re.split(r"(?<=[.;:])\s+", flat) if s]


def test_the_docs_and_the_argument_spec_agree_that_a_server_in_a_container_is_taken_over() -> None:
    """A vLLM server in a docker or podman container on the port is taken over through its runtime; only a Kubernetes
    pod's container is always refused. Every one of README.md, docs/takeover.md, docs/containers.md and the role's
    argument spec says it is taken over, and none says such a server is always refused."""
    sources = {rel(p): p.read_text() for p in (REPO / "README.md", REPO / "docs" / "takeover.md", REPO / "docs" / "containers.md",
                                               ARGUMENT_SPECS)}
    taken = re.compile(r"(container[^.]*taken over|taken over[^.]*container)", re.I)
    refused = re.compile(r"container[^.]*always refused|always refused[^.]*container", re.I)
    problems = []
    for name, text in sources.items():
        said = sentences(text)
        if not any(taken.search(s) for s in said):
            problems.append("%s never says that a server in a container on the port is taken over" % name)
        problems += ["%s: %s" % (name, s) for s in said if refused.search(s) and not re.search(r"kubernetes|pod", s, re.I)]
    assert not problems, "\n".join(problems)


def passages(text: str) -> t.List[str]:
    """The sentences of each paragraph, and each row of a table, whitespace made one space."""
    found: t.List[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            # a table's rows; under a header that names a column "deprecated ...", each row says so
            header = "deprecated" if "deprecated" in lines[0].lower() else ""
            found += ["%s %s" % (" ".join(line.split()), header) for line in lines]
        else:
            found += sentences(paragraph)
    return found


def test_deprecated_names_appear_only_as_deprecated() -> None:
    problems = []
    for path in markdown_files():
        for passage in passages(path.read_text()):
            named = [name for name in DEPRECATED if re.search(r"\b%s\b" % name, passage)]
            if named and "deprecated" not in passage.lower():
                problems.append("%s: %s in: %s" % (rel(path), ", ".join(named), passage))
    assert not problems, "a deprecated name shown as current:\n" + "\n".join(problems)


def test_ci_runs_the_test_command_the_readme_gives() -> None:
    readme = (REPO / "README.md").read_text()
    given = [line.split("#")[0].strip() for lang, body, _line in blocks(REPO / "README.md") if lang in ("sh", "bash", "")
             for line in body.splitlines() if line.strip().startswith("make test")]
    assert given == ["make test"], given
    assert "docs/contributing.md" in readme
    ci = (REPO / ".ci" / "run").read_text()
    runs = [line.strip() for line in ci.splitlines() if line.strip().startswith("exec ")]
    assert runs == ["exec %s" % given[0]], runs


@pytest.mark.parametrize("target", ["CHANGELOG.rst", "docs/troubleshooting.md", "docs/contributing.md", "examples/"])
def test_the_readme_links_what_the_operator_needs(target: str) -> None:
    assert "](%s)" % target in (REPO / "README.md").read_text()


def test_readme_words_and_first_screen() -> None:
    """At most 2,500 words; the first 150 lines hold the requirements, the install and the four quick-start commands."""
    text = (REPO / "README.md").read_text()
    assert len(text.split()) <= 2500, len(text.split())
    first = "\n".join(text.splitlines()[:150])
    with_runtime = re.search(r'requires_ansible:\s*">=\s*([\d.]+)', (REPO / "meta" / "runtime.yml").read_text())
    assert with_runtime is not None
    assert "ansible-core %s" % ".".join(with_runtime.group(1).split(".")[:2]) in first
    for needed in ("ansible-galaxy collection build", "ansible-galaxy collection install", "make collection-path",
                   "not on Ansible Galaxy", "become", "gpuops.fleet.prepare_hosts",
                   "gpuops.fleet.gpu_facts", "gpuops.fleet.restart_vllm --check --diff"):
        assert needed in first, needed


# generated by the release step (antsibull-changelog release), which may not have run in a checkout
NOT_YET = {"CHANGELOG.rst": "written by `antsibull-changelog release` at a release"}


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_resolves() -> None:
    problems = []
    for path in markdown_files():
        text = path.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            file_part, _hash, fragment = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if file_part and str(resolved.relative_to(REPO)) in NOT_YET:
                continue
            if not resolved.exists():
                problems.append("%s: %s does not exist" % (rel(path), target))
            elif fragment and resolved.suffix == ".md":
                headings = {anchor(h) for h in re.findall(r"(?m)^#+\s+(.*)$", resolved.read_text())}
                if fragment not in headings:
                    problems.append("%s: no heading for #%s in %s" % (rel(path), fragment, rel(resolved)))
    assert not problems, "\n".join(problems)


def gives_default(body: str, name: str, value: t.Any) -> bool:
    """Whether ``body`` (a playbook) gives ``name`` the default ``value``: within a few lines after one of its mentions,
    the word default, then every element of the value (its comment or its Jinja default)."""
    words = [str(v) for v in value] if isinstance(value, list) else [str(value).lower() if isinstance(value, bool) else str(value)]
    for found in re.finditer(r"\b%s\b" % name, body):
        window = body[found.end():found.end() + 240]
        if "default" in window:
            after = window[window.index("default"):]
            if all(re.search(r"(?<![\w.])%s(?![\w.])" % re.escape(word), after) for word in words):
                return True
    return False


def test_the_readme_defaults_are_the_code_defaults() -> None:
    """Each row of the README's "Defaults that matter": a literal default is the role's default (roles/vllm_server/
    defaults/main.yml) or, for a playbook's variable, named with that value in the playbook; "required" is required by
    the role's argument spec and has no default."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Defaults that matter", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"(?m)^\| `(\w+)` \| (.*?) \|", section)
    assert len(rows) >= 10, rows
    defaults = load_yaml((REPO / "roles" / "vllm_server" / "defaults" / "main.yml").read_text())
    options = load_yaml(ARGUMENT_SPECS.read_text())["argument_specs"]["main"]["options"]
    # where a variable that is not the role's gets its default: the playbooks, their task files, the role's tasks, the plugins
    playbooks = {rel(path): path.read_text() for pattern in ("playbooks/**/*.yml", "roles/**/*.yml", "plugins/**/*.py")
                 for path in REPO.glob(pattern)}
    problems = []
    for name, cell in rows:
        literal = re.fullmatch(r"`([^`]*)`", cell.strip())
        if "required" in cell:
            # "none: required": the argument spec requires it; "... else required": derived, never a silent default
            if cell.strip().endswith("none: required") and not (options.get(name) or {}).get("required"):
                problems.append("%s: the README says required; the argument spec does not require it" % name)
            if defaults.get(name) not in (None, "") or (options.get(name) or {}).get("default") not in (None, ""):
                problems.append("%s: the README says it has no default; the role's is %r" % (name, defaults.get(name)))
        elif literal:
            value = load_yaml(literal.group(1))
            if name in defaults:
                if defaults[name] != value:
                    problems.append("%s: the README says %r, the role's default is %r" % (name, value, defaults[name]))
            else:
                shown = [f for f, body in playbooks.items() if re.search(r"\b%s\b" % name, body)]
                if not shown:
                    problems.append("%s: neither a default of the role nor a variable of a playbook" % name)
                elif not any(gives_default(playbooks[f], name, value) for f in shown):
                    problems.append("%s: no playbook of %s gives it the default %r" % (name, shown, value))
    assert not problems, "\n".join(problems)


# what a troubleshooting quote writes for a value of the reader's run, and for text it leaves out
QUOTE_PLACEHOLDER = re.compile(r"\.\.\.|\b(?:P|N|NAME|HOST|USER|PLAY|COMMAND|UNIT)\b|<[a-z]+>|`?/\S*|\S*=\S*|\b\d[\d.]*\b|(?<!\w)\([\w.-]+\)")
# a value in a message as the code writes it: %-formats, str.format fields, Jinja expressions
CODE_PLACEHOLDER = re.compile(r"%(?:\([a-z_]+\))?[-#0 +]*\d*(?:\.\d+)?[sdrfi]|\{[a-z_0-9]*\}|\{\{.*?\}\}")


def message_corpus() -> t.List[str]:
    """Every string literal of plugins/ (Python joins adjacent literals into one) and of the two ansible-core files whose
    messages the collection's failures show (a missing library, a missing required variable), and the role's and
    playbooks' YAML, each with its values cut out (an \\x00 where a value goes) and its whitespace made single spaces."""
    texts: t.List[str] = []
    core = Path(basic.__file__).parent
    for path in sorted((REPO / "plugins").rglob("*.py")) + [core / "basic.py", core / "common" / "validation.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    for root in ("roles", "playbooks"):
        texts.extend(path.read_text(encoding="utf-8") for path in sorted((REPO / root).rglob("*.yml")))
    return [" ".join(CODE_PLACEHOLDER.sub("\x00", text).split()) for text in texts]


def quote_fragments(quote: str) -> t.List[str]:
    """The runs of words of a quoted message between its placeholders, five words or more (shorter ones are pieces
    that the code joins, or match anything); for a short message, its runs of three words or more."""
    parts = [" ".join(part.split()).strip(" :;,.()") for part in QUOTE_PLACEHOLDER.split(quote)]
    return [part for part in parts if len(part.split()) >= 5] or [part for part in parts if len(part.split()) >= 3]


def test_the_troubleshooting_quotes_are_what_the_code_writes() -> None:
    """Each message docs/troubleshooting.md quotes (its text blocks), cut at the values of a run, is found word for word
    in a string the code writes: a reworded message fails here, not in an operator's search."""
    corpus = message_corpus()
    path = REPO / "docs" / "troubleshooting.md"
    quotes = [(text, line) for language, text, line in blocks(path) if language == "text"]
    assert len(quotes) >= 10, "%s quotes %d messages, expected ten" % (rel(path), len(quotes))
    missing = []
    for text, line in quotes:
        fragments = quote_fragments(text)
        assert fragments, "%s:%d quotes no words long enough to check: %r" % (rel(path), line, text)
        found = [fragment for fragment in fragments if any(fragment in written for written in corpus)]
        # every long run, or (a short message, whose runs the code may build from pieces) at least one run
        if len(found) < (len(fragments) if len(fragments[0].split()) >= 5 else 1):
            missing.extend("%s:%d: %r" % (rel(path), line, fragment) for fragment in fragments if fragment not in found)
    assert not missing, "quoted but not written by the code:\n" + "\n".join(missing)
