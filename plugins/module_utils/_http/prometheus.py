# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one parser of Prometheus text (exposition format 0.0.4), as a vLLM server's /metrics writes it.

- parse_line(): one sample line: its name, its labels (escaped values decoded), its value (+Inf, -Inf, NaN read as
  Prometheus writes them); an optional timestamp is ignored.
- parse(): every sample of a text by name (a histogram's as NAME_bucket, NAME_sum, NAME_count); lines that are not
  samples are skipped, so one odd line does not hide the rest.
- total(): the sum of one metric over its label sets, only one model's samples where they carry ``model_name``.

Package rule (_http): plain HTTP requests and the Prometheus text of an answer. It imports only the flat files of
module_utils and its own files: never another package, and never a module; every package may import it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

Labels = t.Dict[str, str]
Families = t.Dict[str, t.List[t.Tuple[Labels, float]]]
MODEL_LABEL = "model_name"


class ParseError(ValueError):
    """A line of the exposition that is not a sample."""


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _labels(line: str, start: int) -> t.Tuple[Labels, int]:
    """The label set that opens at line[start] == '{'; returns it and the index after the closing '}'."""
    labels: Labels = {}
    pos = start + 1
    end = len(line)
    while True:
        while pos < end and line[pos] in " \t,":
            pos += 1
        if pos < end and line[pos] == "}":
            return labels, pos + 1
        equals = line.find("=", pos)
        if equals < 0 or equals + 1 >= end or line[equals + 1] != '"':
            raise ParseError("a label without a quoted value")
        name = line[pos:equals].strip()
        pos = equals + 2
        value: t.List[str] = []
        while True:
            if pos >= end:
                raise ParseError("a label value that never closes")
            char = line[pos]
            if char == '"':
                pos += 1
                break
            if char == "\\" and pos + 1 < end:
                value.append(_ESCAPES.get(line[pos + 1], "\\" + line[pos + 1]))
                pos += 2
                continue
            value.append(char)
            pos += 1
        labels[name] = "".join(value)


def parse_line(line: str) -> t.Optional[t.Tuple[str, Labels, float]]:
    """(name, labels, value) of one sample line; None for a comment or a blank line. Raises ParseError."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    pos = 0
    while pos < len(line) and line[pos] not in "{ \t":
        pos += 1
    name = line[:pos]
    if not name:
        raise ParseError("no metric name")
    labels: Labels = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _labels(line, pos)
    fields = line[pos:].split()
    if not fields:
        raise ParseError("no value")
    try:
        value = float(fields[0])  # float() reads +Inf, -Inf and NaN as Prometheus writes them
    except ValueError:
        raise ParseError("the value %r is not a number" % fields[0]) from None
    return name, labels, value


def parse(text: str, names: t.Optional[t.Collection[str]] = None) -> Families:
    """Every sample by its name (a histogram's as NAME_bucket, NAME_sum, NAME_count). With `names`, only the
    samples whose name starts with one of them are parsed (the rest of a large exposition is skipped cheaply).
    Lines that are not samples are skipped: one odd line must not hide the rest."""
    prefixes = tuple(names) if names is not None else None
    families: Families = {}
    for line in text.splitlines():
        if prefixes is not None and not line.startswith(prefixes):
            continue
        try:
            sample = parse_line(line)
        except ParseError:
            continue
        if sample is not None:
            families.setdefault(sample[0], []).append((sample[1], sample[2]))
    return families


def for_model(samples: t.Iterable[t.Tuple[Labels, float]], model: t.Optional[str]) -> t.Iterator[t.Tuple[Labels, float]]:
    """The samples of ``model``: those whose ``model_name`` label names it, and those without that label (every
    sample when ``model`` is None)."""
    for labels, value in samples:
        if model is None or labels.get(MODEL_LABEL, model) == model:
            yield labels, value


def family_total(families: Families, names: t.Union[str, t.Sequence[str]], model: t.Optional[str] = None) -> t.Optional[float]:
    """The sum of the first of `names` the text offers (a counter or a gauge), over the model's samples; None when
    it offers none of them."""
    for name in (names,) if isinstance(names, str) else names:
        if name in families:
            return sum(value for _labels, value in for_model(families[name], model))
    return None


def total(text: str, name: str, model: t.Optional[str] = None) -> t.Optional[float]:
    """The sum of one metric over its label sets in Prometheus text (only the model's samples where they carry
    ``model_name``); None when the metric is absent."""
    return family_total(parse(text, (name,)), name, model)
