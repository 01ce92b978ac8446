"""Source adapters: conversation turns from the session store's public API, and heading-level
document sections with stable ids whose disappearance becomes deletes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picocontext import (
    AppendTransaction,
    InMemoryStore,
    Record,
    Role,
    Scope,
    Snapshot,
    SQLiteStore,
    ToolCall,
)
from picocontext.distill import (
    ConversationSource,
    DocumentFolderSource,
    SessionsView,
    SourceError,
)
from picocontext.distill.sources import split_sections
from picocontext.distill.testing import build
from picocontext.working import WorkingContext

SCOPE = Scope(user_id="ana", conversation_id="kiln-repair", branch_id="main")


def _history(*records: Record) -> WorkingContext:
    return WorkingContext.start(Snapshot(scope=SCOPE, records=records))


def _records() -> tuple[Record, ...]:
    return (
        Record(id="sys", role=Role.SYSTEM, body="You help with pottery kilns."),
        Record(
            id="u1",
            role=Role.USER,
            protected=True,
            body="The kiln stalls at 900 C. What should I check?",
        ),
        Record(id="a1", role=Role.ASSISTANT, body="Check the relay and the thermocouple."),
        Record(
            id="a1b",
            role=Role.ASSISTANT,
            body="Looking up the manual.",
            tool_calls=(ToolCall(id="c1", name="manual", arguments="{}"),),
        ),
        Record(id="t1", role=Role.TOOL, tool_call_id="c1", body="Relay rated for 20 A."),
        Record(id="u2", role=Role.USER, body="The relay clicks but the elements stay cold."),
        Record(id="a2", role=Role.ASSISTANT, body="Then measure the element resistance."),
    )


def _fixed_clock() -> dt.datetime:
    return dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


def test_turns_from_a_sqlite_session_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.sqlite")
    store.save(_history(*_records()))
    source = ConversationSource(store, clock=_fixed_clock)
    units = source.units()
    assert [u.unit_id for u in units] == ["ana/kiln-repair/main:u1", "ana/kiln-repair/main:u2"]
    first = units[0]
    assert first.text.splitlines() == [
        "User: The kiln stalls at 900 C. What should I check?",
        "Assistant: Check the relay and the thermocouple.",
        "Assistant: Looking up the manual. [called manual]",
    ]
    assert "20 A" not in first.text  # tool results are not part of a turn
    assert first.scopes == (("conversation", "ana/kiln-repair/main"), ("day", "2026-11-30"))
    assert first.title.startswith("The kiln stalls")


def test_day_is_remembered_from_first_sight(tmp_path: Path) -> None:
    store = InMemoryStore()
    store.save(_history(*_records()[:3]))
    d = build(tmp_path / "c")
    days = iter(["2026-11-29", "2026-11-30"])

    def clock() -> dt.datetime:
        return dt.datetime.fromisoformat(next(days) + "T12:00:00+00:00")

    class History:
        def scopes(self) -> list[Scope]:
            return [SCOPE]

        def load(self, scope: Scope) -> WorkingContext | None:
            return store.load(scope)

    source = ConversationSource(History(), clock=clock)
    d.sync(source)
    store.save(
        store.load(SCOPE).append(  # type: ignore[union-attr]
            AppendTransaction(
                scope=SCOPE,
                base_revision=0,
                records=(
                    Record(id="u2", role=Role.USER, body="Next day question"),
                    Record(id="a2", role=Role.ASSISTANT, body="Next day answer"),
                ),
            )
        )
    )
    report = d.sync(source)
    assert report.marked == 1 and report.unchanged == 1
    days_of = {n.source_id: [p for p in n.parent_ids if ":day:" in p] for n in d.store.nodes(0)}
    assert days_of["ana/kiln-repair/main:u1"] == ["digest:1:scope:day:2026-11-29"]
    assert days_of["ana/kiln-repair/main:u2"] == ["digest:1:scope:day:2026-11-30"]


def test_transcript_view_keeps_what_the_working_view_deleted(tmp_path: Path) -> None:
    from picocontext import Delete, Edit

    ctx = _history(*_records())
    edited = ctx.apply(
        Edit(
            scope=SCOPE,
            base_revision=0,
            operations=(Delete(record_id="u2"), Delete(record_id="a2")),
        )
    )
    view = SessionsView([type("S", (), {"scope": SCOPE, "state": edited})()])
    full = ConversationSource(view, clock=_fixed_clock).units()
    working = ConversationSource(view, view="working", clock=_fixed_clock).units()
    assert len(full) == 2 and len(working) == 1


def test_conversation_source_rejects_bad_inputs() -> None:
    with pytest.raises(SourceError):
        ConversationSource(object())  # type: ignore[arg-type]
    with pytest.raises(SourceError):
        ConversationSource(InMemoryStore(), view="both")


# -- documents -------------------------------------------------------------------------------


GUIDE = """Intro paragraph before any heading.

# Kiln guide

Overview text.

## Wiring

Relays and elements.

```
# not a heading inside a fence
```

## Firing

Cone 6 schedule.

## Firing

A second section with the same heading.

#### Too deep to split

Stays inside Firing.
"""


def test_split_sections_by_heading_path() -> None:
    sections = split_sections(GUIDE, "guide.md")
    ids = [s[0] for s in sections]
    assert ids == [
        "_preamble",
        "kiln-guide",
        "kiln-guide/wiring",
        "kiln-guide/firing",
        "kiln-guide/firing~2",
    ]
    wiring = dict((s[0], s[2]) for s in sections)["kiln-guide/wiring"]
    assert "# not a heading inside a fence" in wiring
    assert "Too deep to split" in sections[-1][2]
    assert split_sections("no headings here", "notes.txt") == [
        ("_file", "notes.txt", "no headings here")
    ]


def test_rst_titles() -> None:
    text = "Title\n=====\n\nBody.\n\nPart\n----\n\nMore.\n"
    assert [s[0] for s in split_sections(text, "a.rst")] == ["title", "title/part"]


def test_document_folder_sync_edits_and_deletes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "guide.md").write_text(GUIDE, encoding="utf-8")
    (docs / "sub" / "notes.txt").write_text("Loose notes about glazes.", encoding="utf-8")
    (docs / ".hidden.md").write_text("# Secret\nskip me", encoding="utf-8")
    (docs / "image.png").write_bytes(b"\x89PNG")
    source = DocumentFolderSource(docs)
    d = build(tmp_path / "c")
    first = d.sync(source)
    assert first.units == 6 and first.marked == 6
    ids = {n.source_id for n in d.store.nodes(0)}
    assert "guide.md:kiln-guide/wiring" in ids and "sub/notes.txt:_file" in ids
    leaf = d.store.get("digest:0:doc:guide.md:kiln-guide/wiring")
    assert leaf is not None
    assert leaf.parent_ids[:2] == (
        "digest:1:scope:document:guide.md",
        "digest:1:scope:folder:.",
    )
    assert leaf.title == "Wiring"
    # Insert a section above: existing ids do not shift; only the new one is summarised.
    (docs / "guide.md").write_text(
        GUIDE.replace("## Wiring", "## Safety\n\nGloves.\n\n## Wiring"), encoding="utf-8"
    )
    second = d.sync(source)
    assert second.marked == 1 and second.deletes == 0
    # Remove a section: its leaf is deleted.
    (docs / "guide.md").write_text(
        GUIDE.replace("## Wiring\n\nRelays and elements.\n", ""), encoding="utf-8"
    )
    third = d.sync(source)
    assert third.deletes == 2  # Wiring is gone, Safety went with the rewrite
    assert d.store.get("digest:0:doc:guide.md:kiln-guide/wiring") is None
    (docs / "sub" / "notes.txt").unlink()
    assert d.sync(source).deletes == 1
    assert d.sync(source).marked == 0


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        DocumentFolderSource(tmp_path / "nope")


def test_live_context_sessions_feed_the_tree(tmp_path: Path) -> None:
    from picocontext import ContextSession
    from picocontext.models import ByteCounter, ScriptedBackend

    session = ContextSession(
        Snapshot(scope=SCOPE, records=_records()[:3]), ByteCounter(), ScriptedBackend()
    )
    source = ConversationSource(SessionsView([session]), clock=_fixed_clock)
    d = build(tmp_path / "c")
    assert d.sync(source).marked == 1
    session.append_records(
        [
            Record(id="u2", role=Role.USER, body="Elements stay cold."),
            Record(id="a2", role=Role.ASSISTANT, body="Measure their resistance."),
        ]
    )
    report = d.sync(source)
    assert report.marked == 1 and report.unchanged == 1
    assert d.store.get("digest:1:scope:conversation:ana/kiln-repair/main") is not None


_BLOCKS = st.one_of(
    st.tuples(
        st.just("h"), st.integers(1, 6), st.sampled_from(["Intro", "Setup", "Usage", "Notes"])
    ),
    st.tuples(st.just("p"), st.integers(0, 0), st.sampled_from(["Some text.", "More words here."])),
    st.tuples(st.just("f"), st.integers(0, 0), st.sampled_from(["# fenced", "code()"])),
)


@given(st.lists(_BLOCKS, max_size=25), st.integers(1, 6))
def test_sections_partition_the_document(
    blocks: list[tuple[str, int, str]], max_level: int
) -> None:
    lines: list[str] = []
    for kind, level, text in blocks:
        if kind == "h":
            lines.append("#" * level + " " + text)
        elif kind == "p":
            lines.append(text)
        else:
            lines += ["```", text, "```"]
        lines.append("")
    doc = "\n".join(lines)
    sections = split_sections(doc, "doc.md", max_level)
    ids = [s[0] for s in sections]
    assert len(ids) == len(set(ids))  # stable, unique ids
    kept = [x for s in sections for x in s[2].splitlines() if x.strip()]
    original = [x for x in doc.splitlines() if x.strip()]
    assert kept == original  # every line lands in exactly one section, in order
