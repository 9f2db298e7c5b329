# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The rules of every HTML page this collection writes: one self-contained file whose Content-Security-Policy allows
nothing from outside (no fetch, no external script, style, font or image), every value escaped.

A flat file of module_utils: it imports no package of this collection.
Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import base64
import hashlib
import html
import typing as t


def esc(value: t.Any) -> str:
    """``value`` as text for HTML or SVG, in an element or a quoted attribute (None is empty)."""
    return html.escape("" if value is None else str(value), quote=True)


def csp(script: t.Optional[str] = None) -> str:
    """The page's Content-Security-Policy: inline style, data: images, and only ``script`` (by its hash) as script."""
    scripts = "'sha256-%s'" % base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii") if script else "'none'"
    return "default-src 'none'; style-src 'unsafe-inline'; script-src %s; img-src data:; base-uri 'none'; form-action 'none'" % scripts


def document(title: str, style: str, body: str, script: t.Optional[str] = None) -> str:
    """A whole page: the policy of csp(``script``), ``style`` inline, ``body`` (already HTML), ``script`` last."""
    return "".join((
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="%s">' % esc(csp(script)),
        '<meta name="viewport" content="width=device-width, initial-scale=1"><title>%s</title><style>%s</style></head><body>' % (
            esc(title), style),
        body,
        "<script>%s</script>" % script if script else "",
        "</body></html>\n",
    ))
