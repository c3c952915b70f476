"""One self-contained HTML page from a viewer document (``bdh/viz/viewer/``'s files, the data inlined); no network."""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

VIEWER_FILES = ("viewer.html", "viewer.js", "viewer.css")


def _asset(name: str) -> str:
    return resources.files("bdh.viz").joinpath("viewer", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """Compact JSON safe in a ``<script type="application/json">``: ``<``, ``>``, ``&`` escaped as \\u sequences."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def render(view: dict[str, Any]) -> str:
    """The HTML page of a document from `bdh.viz.export.build_view`."""
    page = _asset("viewer.html")
    parts = {
        "__TITLE__": html.escape(str(view.get("title", "BDH viewer"))),
        "__CSS__": _asset("viewer.css"),
        "__JS__": _asset("viewer.js").replace("</script", "<\\/script"),
        "__DATA__": embed_json(view),
    }
    # one pass, so that no replacement is searched for placeholders again
    out, i = [], 0
    while True:
        hits = [(page.find(k, i), k) for k in parts if page.find(k, i) >= 0]
        if not hits:
            out.append(page[i:])
            break
        pos, key = min(hits)
        out.append(page[i:pos])
        out.append(parts[key])
        i = pos + len(key)
    return "".join(out)
