"""``python -m picocontext_playground``: ``picocontext app`` under the name ``picocontext``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from picocontext_playground.cli import run

    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
