"""``python -m bdh``: the same as the ``bdh`` command."""

from bdh.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
