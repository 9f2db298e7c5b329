# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Which environment variables and server arguments are secrets, and how they are shown: never by value.

An environment variable is secret when one of the words of its name (split at every character that is not a letter
or a digit) is KEY, APIKEY, TOKEN, SECRET(S), PASSWORD, PASSWD or CREDENTIAL(S), in any case (HF_TOKEN,
VLLM_API_KEY, AWS_SECRET_ACCESS_KEY), or when the caller names it (the role's vllm_server_secret_env).
An argument is secret when it is the value of an option whose name is such a name (--api-key K, --api-key=K,
--hf-token K): the word after the option, and the following ones up to the next word that starts with --
(vLLM takes several keys after one --api-key), or what follows the = of --option=value.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import re
import typing as t

MASK = "********"
SECRET_WORDS = frozenset(("KEY", "APIKEY", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"))
API_KEY_OPTION = "--api-key"
API_KEY_ENV = "VLLM_API_KEY"
_WORDS = re.compile(r"[^A-Za-z0-9]+")


def is_secret_name(name: t.Any, extra: t.Iterable[str] = ()) -> bool:
    """Whether an environment variable (or option) of this name holds a secret."""
    text = str(name)
    if text in set(str(item) for item in extra):
        return True
    return any(word in SECRET_WORDS for word in _WORDS.split(text.upper()))


def secret_env_names(env: t.Mapping[str, t.Any], extra: t.Iterable[str] = ()) -> t.List[str]:
    extra = list(extra)
    return sorted(str(name) for name in env if is_secret_name(name, extra))


def _option_name(word: str) -> t.Optional[str]:
    if not word.startswith("--") or word == "--":
        return None
    return word[2:].split("=", 1)[0]


class Secret(t.NamedTuple):
    index: int  # position in argv
    start: int  # where the secret begins in that word: 0, or just after the = of --option=value
    option: str  # the option's name, without the dashes


def argv_secrets(argv: t.Sequence[t.Any]) -> t.List[Secret]:
    """Every secret value in ``argv``, in order (empty ones are no secrets)."""
    found: t.List[Secret] = []
    owner: t.Optional[str] = None  # the secret option whose values come next
    for index, raw in enumerate(argv):
        word = str(raw)
        if owner is not None and not word.startswith("--"):
            if word:
                found.append(Secret(index, 0, owner))
            continue
        owner = None
        name = _option_name(word)
        if name is None or not is_secret_name(name):
            continue
        if "=" in word:
            start = word.index("=") + 1
            if start < len(word):
                found.append(Secret(index, start, name))
        else:
            owner = name
    return found


def api_key_of(argv: t.Sequence[t.Any], env: t.Optional[t.Mapping[str, t.Any]] = None) -> str:
    """The key a client must send, as vLLM settles it: the first value of the last --api-key, else VLLM_API_KEY."""
    key = ""
    for secret in argv_secrets(argv):
        if secret.option == API_KEY_OPTION[2:]:
            word = str(argv[secret.index])
            if secret.start or str(argv[secret.index - 1]) == API_KEY_OPTION:
                key = word[secret.start:]
    if not key and env:
        key = str(env.get(API_KEY_ENV) or "")
    return key


def secret_argv_values(argv: t.Sequence[t.Any]) -> t.List[str]:
    return [str(argv[secret.index])[secret.start:] for secret in argv_secrets(argv)]


def masked_argv(argv: t.Sequence[t.Any]) -> t.List[str]:
    """``argv`` as words, each secret value replaced by MASK (``--api-key=********``). A word with spaces in it (a process
    title set with setproctitle is one word: ``python3 serve.py --api-key K``) is masked inside as well."""
    words = [str(word) for word in argv]
    for secret in argv_secrets(words):
        words[secret.index] = words[secret.index][:secret.start] + MASK
    return [masked_text(word) if any(ch.isspace() for ch in word) else word for word in words]


def masked_text(value: t.Any) -> t.Optional[str]:
    """A command line or a process title as one text, the value of every secret option in it masked; None stays None."""
    if value is None:
        return None
    text = " ".join(str(word) for word in value) if isinstance(value, (list, tuple)) else str(value)
    words = text.split()
    secrets = argv_secrets(words)
    if not secrets:
        return text
    for secret in secrets:
        words[secret.index] = words[secret.index][:secret.start] + MASK
    return " ".join(words)


def mask_cmdlines(value: t.Any) -> t.Any:
    """``value`` (a module result: dicts and lists) with every ``cmdline`` list masked as masked_argv does, and every
    ``name`` that is a whole process title masked inside, so that a process's ``--api-key K`` read from /proc is never
    returned or printed. Other values are returned as they are."""
    if isinstance(value, dict):
        return {key: _masked_field(key, item) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_cmdlines(item) for item in value]
    return value


def _masked_field(key: str, item: t.Any) -> t.Any:
    if key == "cmdline" and isinstance(item, (list, tuple)):
        return masked_argv(item)
    if key == "name" and isinstance(item, str):
        return masked_text(item)
    return mask_cmdlines(item)


def env_summary(env: t.Mapping[str, t.Any], extra: t.Iterable[str] = ()) -> t.Dict[str, str]:
    """The environment as it may be shown: secret values replaced by MASK."""
    secret = set(secret_env_names(env, extra))
    return {str(name): MASK if name in secret else ("" if value is None else str(value)) for name, value in env.items()}


def hide_only_secrets(module: t.Any, shown: t.Iterable[t.Any], secrets: t.Iterable[t.Any]) -> None:
    """Narrow what Ansible hides in a module's result to the secrets.

    Ansible replaces every value of a ``no_log`` option wherever it appears in the result, even inside other strings:
    with ``env`` and ``argv`` no_log, a value such as V(LL) or V(1) would be starred out of every message and
    process name (``V********M::Worker``). This keeps only the secret values hidden; ``shown`` are the options'
    values (words of argv, values of env) that are not secret."""
    hidden = set(str(value) for value in secrets if value not in (None, ""))
    for value in shown:
        text = str(value)
        if text not in hidden:
            module.no_log_values.discard(text)
    module.no_log_values.update(hidden)
