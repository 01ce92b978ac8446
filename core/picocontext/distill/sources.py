"""Source adapters: turn a conversation history or a document folder into units with scopes.

An adapter lists the *complete* current set of units of its source; the distiller's reconcile
compares that set with the tree, so edits re-summarise, unchanged units cost nothing and
vanished units become deletes. Unit ids are stable under upstream insertions: a turn is named
by its user record's id, a document section by its heading path.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from picocontext.distill.data import Unit
from picocontext.distill.errors import SourceError
from picocontext.errors import PicoContextError
from picocontext.files import InputFileError, SourceWalk, files_under, read_text_bounded
from picocontext.persistence import ContextStore
from picocontext.records import Record, Role, Scope
from picocontext.working import WorkingContext


class AdapterState(Protocol):
    """Small persistent key/value memory an adapter may use (kept in the corpus store)."""

    def state_get(self, adapter: str, key: str) -> str | None: ...

    def state_set(self, adapter: str, key: str, value: str) -> None: ...


@runtime_checkable
class SourceAdapter(Protocol):
    @property
    def source_kind(self) -> str: ...

    @property
    def version(self) -> str:
        """Adapter version; enters the recipe because it shapes the source text."""
        ...

    def units(self, state: AdapterState | None = None) -> list[Unit]: ...


# -- conversations ---------------------------------------------------------------------------


@runtime_checkable
class SessionHistory(Protocol):
    """What the conversation adapter reads: ``SQLiteStore`` satisfies it."""

    def scopes(self) -> list[Scope]: ...

    def load(self, scope: Scope) -> WorkingContext | None: ...


class LiveSession(Protocol):
    """What :class:`SessionsView` needs of a session: ``picocontext.ContextSession`` has it."""

    @property
    def scope(self) -> Scope: ...

    @property
    def state(self) -> WorkingContext: ...


class SessionsView:
    """Adapts live sessions (e.g. :class:`picocontext.ContextSession`) to
    :class:`SessionHistory`, so a running chat can be distilled without a store."""

    def __init__(self, sessions: Sequence[LiveSession]) -> None:
        self._sessions = list(sessions)

    def scopes(self) -> list[Scope]:
        return [s.scope for s in self._sessions]

    def load(self, scope: Scope) -> WorkingContext | None:
        for s in self._sessions:
            if s.scope == scope:
                return s.state
        return None


def _title(text: str, words: int = 10) -> str:
    parts = text.split()
    head = " ".join(parts[:words])
    return head + ("…" if len(parts) > words else "")


class ConversationSource:
    """User+assistant turns as leaves; scopes ``conversation`` and ``day``.

    * ``view="transcript"`` distils the preserved original transcript (nothing the model
      deleted from its working context is lost); ``"working"`` distils the working revision.
    * A turn is a user record plus the assistant records that follow it (tool results are
      left out; tool calls are named). Its id is ``{user}/{conversation}/{branch}:{record id}``.
    * ``day`` is the UTC date on which the turn was first seen, remembered in the adapter
      state, because records carry no timestamps (see docs/distill.md).
    * A conversation the store cannot read (a damaged row) is left out and named in
      :attr:`skipped`; the other conversations are read.
    """

    def __init__(
        self,
        history: SessionHistory | ContextStore,
        view: str = "transcript",
        source_kind: str = "turn",
        budget: int = 96,
        clock: Callable[[], _dt.datetime] | None = None,
    ) -> None:
        if view not in ("transcript", "working"):
            raise SourceError(f"view must be 'transcript' or 'working', got {view!r}.")
        if not isinstance(history, SessionHistory):
            raise SourceError(
                "The conversation source needs a store with scopes() and load(scope), "
                "e.g. picocontext.SQLiteStore or SessionsView([...sessions])."
            )
        self._history = history
        self._view = view
        self._kind = source_kind
        self._budget = budget
        self._clock = clock or (lambda: _dt.datetime.now(_dt.UTC))
        self.skipped: list[str] = []

    @property
    def source_kind(self) -> str:
        return self._kind

    @property
    def version(self) -> str:
        return f"conversation-1:{self._view}:{self._budget}"

    def _records(self, scope: Scope) -> tuple[Record, ...]:
        """The conversation's records; none (and named in :attr:`skipped`) if it cannot be
        read, so one damaged conversation does not stop the others."""
        try:
            state = self._history.load(scope)
        except PicoContextError as exc:
            self.skipped.append(f"conversation {scope}: {exc.message}")
            return ()
        if state is None:
            return ()
        return state.original.records if self._view == "transcript" else state.snapshot.records

    def units(self, state: AdapterState | None = None) -> list[Unit]:
        self.skipped = []
        try:
            scopes = self._history.scopes()
        except PicoContextError as exc:
            raise SourceError(f"Cannot list conversations: {exc}") from exc
        units: list[Unit] = []
        today = self._clock().astimezone(_dt.UTC).date().isoformat()
        for scope in scopes:
            conv = f"{scope.user_id}/{scope.conversation_id}/{scope.branch_id}"
            for anchor, lines in _turns(self._records(scope)):
                unit_id = f"{conv}:{anchor}"
                day = state.state_get(self._kind, "day:" + unit_id) if state else None
                if day is None:
                    day = today
                    if state is not None:
                        state.state_set(self._kind, "day:" + unit_id, day)
                text = "\n".join(lines)
                units.append(
                    Unit(
                        source_kind=self._kind,
                        unit_id=unit_id,
                        text=text,
                        scopes=(("conversation", conv), ("day", day)),
                        budget=self._budget,
                        title=_title(lines[0].partition(": ")[2] if lines else text),
                    )
                )
        return units


def _turns(records: Sequence[Record]) -> list[tuple[str, list[str]]]:
    turns: list[tuple[str, list[str]]] = []
    for record in records:
        if record.role == Role.USER:
            turns.append((record.id, [f"User: {record.body.strip()}"]))
        elif record.role == Role.ASSISTANT:
            body = record.body.strip()
            calls = ", ".join(c.name for c in record.tool_calls)
            line = "Assistant: " + body + (f" [called {calls}]" if calls else "")
            if turns:
                turns[-1][1].append(line)
            else:
                turns.append((record.id, [line]))
    return turns


# -- documents -------------------------------------------------------------------------------

# A document larger than this is skipped (and named), never read whole.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
_ATX = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+])\1{2,}\s*$")


def slug(text: str) -> str:
    """Lowercase words joined by '-' (stable, URL-safe section names)."""
    words = re.findall(r"[\w]+", text.lower())
    return "-".join(words)[:60] or "section"


class DocumentFolderSource:
    """Heading-level sections of the text files in a folder.

    Markdown (``#`` headings outside code fences, up to ``max_level``) and reStructuredText
    (underlined titles) are split into sections; other text files are one section each. A
    section id is ``{relative path}:{slug/of/heading/path}`` (``~2`` for a repeated heading),
    so inserting a section above does not rename the ones below. Scopes are ``document``
    (the relative path) and ``folder`` (its parent, ``.`` at the top).

    The folder is a boundary: the walk never follows a symlink out of it. A file that leads
    outside, is not a regular file, is not UTF-8, cannot be read or holds more than
    ``max_bytes`` is left out and named in :attr:`skipped`; the rest of the folder is read.
    """

    def __init__(
        self,
        root: str | Path,
        patterns: Sequence[str] = ("*.md", "*.markdown", "*.rst", "*.txt"),
        source_kind: str = "doc",
        max_level: int = 3,
        budget: int = 128,
        exclude: Sequence[str] = (".*", "node_modules", "__pycache__", ".venv", "venv"),
        max_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            what = "is not a folder" if self.root.exists() else "does not exist"
            raise SourceError(f"Document folder {self.root} {what}.")
        self._patterns = tuple(patterns)
        self._kind = source_kind
        self._max_level = max_level
        self._budget = budget
        self._exclude = tuple(exclude)
        self._max_bytes = max_bytes
        self.skipped: list[str] = []

    @property
    def source_kind(self) -> str:
        return self._kind

    @property
    def version(self) -> str:
        return f"docs-1:{self._max_level}:{self._budget}"

    def _unwanted(self, path: Path) -> bool:
        """Excluded names (with everything below them) and files no pattern matches."""
        if any(fnmatch.fnmatch(path.name, ex) for ex in self._exclude):
            return True
        return not path.is_dir() and not any(fnmatch.fnmatch(path.name, p) for p in self._patterns)

    def _walk(self) -> SourceWalk:
        try:
            return files_under(self.root, ignore=self._unwanted)
        except InputFileError as exc:
            raise SourceError(f"Document folder {exc.message}") from None

    def files(self) -> list[Path]:
        """The documents the next :meth:`units` reads (what the walk refused is skipped)."""
        return self._walk().files

    def units(self, state: AdapterState | None = None) -> list[Unit]:
        walk = self._walk()
        self.skipped = list(walk.skipped)
        units: list[Unit] = []
        for path in walk.files:
            try:
                text = read_text_bounded(path, self._max_bytes)
            except InputFileError as exc:
                self.skipped.append(exc.message)
                continue
            units.extend(self._sections(path, text))
        return units

    def _sections(self, path: Path, text: str) -> list[Unit]:
        rel = path.relative_to(self.root).as_posix()
        folder = path.parent.relative_to(self.root).as_posix() or "."
        return [
            Unit(
                source_kind=self._kind,
                unit_id=f"{rel}:{section_id}",
                text=body,
                scopes=(("document", rel), ("folder", folder)),
                budget=self._budget,
                title=title,
            )
            for section_id, title, body in split_sections(text, rel, self._max_level)
            if body.strip()
        ]


def split_sections(text: str, name: str, max_level: int = 3) -> list[tuple[str, str, str]]:
    """(section id, title, text) per heading-level section; the text before the first heading
    is ``_preamble``; a file without headings is one ``_file`` section."""
    lines = text.splitlines()
    heads: list[tuple[int, int, str]] = []  # (line index, level, title)
    in_fence = False
    rst = name.endswith(".rst")
    rst_levels: list[str] = []
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if rst:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            under = _RST_UNDERLINE.match(nxt)
            if line.strip() and under and len(nxt.rstrip()) >= len(line.rstrip()):
                char = under.group(1)
                if char not in rst_levels:
                    rst_levels.append(char)
                level = rst_levels.index(char) + 1
                if level <= max_level:
                    heads.append((i, level, line.strip()))
            continue
        match = _ATX.match(line)
        if match and len(match.group(1)) <= max_level:
            heads.append((i, len(match.group(1)), match.group(2).strip()))
    if not heads:
        return [("_file", Path(name).name, text)]
    sections: list[tuple[str, str, str]] = []
    if any(x.strip() for x in lines[: heads[0][0]]):
        sections.append(("_preamble", Path(name).name, "\n".join(lines[: heads[0][0]])))
    path: list[tuple[int, str]] = []
    used: dict[str, int] = {}
    for n, (start, level, title) in enumerate(heads):
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, slug(title)))
        base = "/".join(s for _, s in path)
        used[base] = used.get(base, 0) + 1
        section_id = base if used[base] == 1 else f"{base}~{used[base]}"
        sections.append((section_id, title, "\n".join(lines[start:end]).strip()))
    return sections
