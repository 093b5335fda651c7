"""The page: one self-contained HTML file (inline CSS and JS, data as inline JSON, no network).

Untrusted text (model output, documents, ids) reaches the page only as JSON inside
``<script type="application/json">``, with ``<``, ``>``, ``&``, U+2028 and U+2029 written as
``\\uXXXX`` escapes so nothing in it can close the tag, and the script renders it with
``textContent`` only. A Content-Security-Policy allows no network at all and only the page's
own script (by its SHA-256), so an injected script would not run even if escaping failed.
"""

from __future__ import annotations

import base64
import hashlib
import json
from importlib import resources
from typing import Any

from spyrl.viewer.payload import LOGPROB_ALPHABET, LOGPROB_STEP

__all__ = ["embed_json", "render_page"]

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(data: Any) -> str:
    """``data`` as JSON safe to place inside a ``<script type="application/json">`` element.

    >>> embed_json({"t": "</script><b>&"})
    '{"t":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escape in _ESCAPES.items():
        text = text.replace(char, escape)
    return text


def _asset(name: str) -> str:
    return resources.files("spyrl.viewer").joinpath("assets", name).read_text(encoding="utf-8")


def render_page(payload: dict[str, Any]) -> str:
    """The whole HTML page for a payload from :mod:`spyrl.viewer.payload`."""
    script = _asset("viewer.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    page = _asset("page.html")
    # The title is the only data outside the JSON block: escape it as HTML text.
    title = "".join({"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;"}.get(c, c) for c in payload["title"])
    parts = {
        "@CSP@": csp,
        "@TITLE@": title,
        "@CSS@": _asset("viewer.css"),
        "@DATA@": embed_json({**payload, "logprobs": {"alphabet": LOGPROB_ALPHABET, "step": LOGPROB_STEP}}),
        "@SCRIPT@": script,
    }
    # Markers are filled in template order, each searched only after the previous value, so a
    # value that happens to contain a marker (model text may) is never substituted into.
    out, rest = [], page
    for marker, value in parts.items():
        head, sep, rest = rest.partition(marker)
        if not sep:
            raise RuntimeError(f"viewer template lacks {marker} (or has it out of order)")
        out += [head, value]
    out.append(rest)
    return "".join(out)
