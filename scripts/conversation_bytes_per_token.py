"""UTF-8 bytes per token of conversations' turn texts under one or more tokenizers: the
measurement behind the deterministic backend's default ``--bytes-per-token`` (4).

``python scripts/conversation_bytes_per_token.py --tokenizer DIR/tokenizer.json [...]
resources/conversations/*.json`` prints one line per tokenizer.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from picocontext_diagnostics.conversations.format import load_conversation


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, action="append", required=True)
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args(argv)
    from tokenizers import Tokenizer

    texts = [t.text for f in args.files for s in load_conversation(f).sessions for t in s.turns]
    size = sum(len(t.encode("utf-8")) for t in texts)
    for path in args.tokenizer:
        tokens = sum(len(Tokenizer.from_file(str(path)).encode(t).ids) for t in texts)
        ratio = size / tokens
        print(f"{path.parent.name}: {size:,} bytes, {tokens:,} tokens, {ratio:.2f} bytes/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
