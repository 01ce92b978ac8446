"""Text checks shared by validators: UTF-8 sizes that never crash on hostile strings."""

from __future__ import annotations

from picocontext.errors import InvalidContext


def utf8_len(text: str) -> int:
    """UTF-8 byte length; a lone surrogate cannot be encoded and is rejected clearly."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidContext("text contains a lone surrogate and is not valid Unicode") from None


def require_unicode(text: str) -> None:
    utf8_len(text)
