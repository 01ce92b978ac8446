"""A small, strict frontmatter reader (a ``---`` block at the top of a markdown file).

It understands the YAML subset real skill/memory/docs files use -- ``key: value``, quoted
strings, inline ``[a, b]`` lists, ``- item`` block lists and one level of nested mapping --
and reports anything else as a :class:`SourceError` naming the file and line, instead of
letting a parser exception escape (the peer's PyYAML path did).
"""

from __future__ import annotations

import re

from picocontext.build.errors import SourceError

FrontValue = str | list[str] | dict[str, str]

_KEY = re.compile(r"^([A-Za-z_][\w\-.]*)\s*:\s*(.*)$")


def _scalar(raw: str) -> str:
    s = raw.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        inner = s[1:-1]
        return inner.replace('\\"', '"') if s[0] == '"' else inner.replace("''", "'")
    if " #" in s:
        s = s.split(" #", 1)[0].rstrip()
    return s


def _inline_list(raw: str) -> list[str]:
    inner = raw.strip()[1:-1]
    return [_scalar(p) for p in inner.split(",") if p.strip()]


def split_frontmatter(text: str, where: str = "<text>") -> tuple[dict[str, FrontValue], str]:
    """(frontmatter, body). No leading ``---`` line means no frontmatter."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
    if end is None:
        raise SourceError(f"{where}: frontmatter starts with '---' but is never closed")
    data: dict[str, FrontValue] = {}
    current: str | None = None
    for lineno in range(1, end):
        line = lines[lineno]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indented = line[0] in " \t"
        if indented:
            if current is None:
                raise SourceError(f"{where}:{lineno + 1}: indented line outside a mapping")
            item = line.strip()
            holder = data[current]
            if item.startswith("- "):
                if isinstance(holder, dict) and holder:
                    raise SourceError(f"{where}:{lineno + 1}: list item inside a mapping")
                if not isinstance(holder, list):
                    holder = []
                    data[current] = holder
                holder.append(_scalar(item[2:]))
                continue
            m = _KEY.match(item)
            if m is None:
                raise SourceError(f"{where}:{lineno + 1}: cannot read {item[:60]!r}")
            if isinstance(holder, list) and holder:
                raise SourceError(f"{where}:{lineno + 1}: mapping entry inside a list")
            if not isinstance(holder, dict):
                holder = {}
                data[current] = holder
            value = m.group(2)
            holder[m.group(1)] = (
                ", ".join(_inline_list(value)) if value.strip().startswith("[") else _scalar(value)
            )
            continue
        m = _KEY.match(line)
        if m is None:
            raise SourceError(f"{where}:{lineno + 1}: expected 'key: value', got {line[:60]!r}")
        key, value = m.group(1), m.group(2).strip()
        current = key
        if not value:
            data[key] = ""
        elif value.startswith("[") and value.endswith("]"):
            data[key] = _inline_list(value)
        elif value in ("|", ">", "|-", ">-"):
            raise SourceError(f"{where}:{lineno + 1}: block scalars ({value}) are not supported")
        else:
            data[key] = _scalar(value)
    body = "".join(text.splitlines(keepends=True)[end + 1 :])
    return data, body.lstrip("\n")


def as_text(value: FrontValue | None) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return value


def as_list(value: FrontValue | None) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [v for v in value if v]
    if isinstance(value, dict):
        return list(value.values())
    return [p.strip() for p in value.split(",") if p.strip()]


def flat_meta(front: dict[str, FrontValue]) -> dict[str, str]:
    """Every frontmatter field as one string each, for the incremental key (B3)."""
    out: dict[str, str] = {}
    for key, value in front.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                out[f"{key}.{sub}"] = v
        else:
            out[key] = as_text(value)
    return out


_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def first_heading(body: str) -> str | None:
    m = _H1.search(body)
    return m.group(1).strip() if m else None
