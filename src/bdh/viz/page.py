"""One self-contained HTML page from a viewer document: the template, script and style shipped in
``bdh/viz/viewer/`` with the data inlined as JSON. No network access is needed to open it."""

from __future__ import annotations

import html
import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

VIEWER_FILES = ("viewer.html", "viewer.js", "viewer.css")


def _asset(name: str) -> str:
    return resources.files("bdh.viz").joinpath("viewer", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside a ``<script type="application/json">`` element: ``<``, ``>`` and ``&`` escaped
    as \\u sequences (so no ``</script>`` can close the element), compact separators."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


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


def file_mode() -> int:
    """The mode a new file gets under the current umask (mkstemp would give 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
