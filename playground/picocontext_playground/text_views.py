"""The scrolling text views of a policy column: plain text (:class:`TextPane`), a context's
records with what was deleted or replaced (:class:`ContextView`), and every decision attempt
and tool call of the steps (:class:`AttemptsView`).

They render finished snapshots and run reports; long texts are never shortened.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QPlainTextEdit, QTextBrowser, QWidget

from picocontext import Record, RunReport, Snapshot
from picocontext_playground.comparison import clip_result, no_decision_text
from picocontext_playground.qtenv import monospace_font
from picocontext_playground.results import (
    StepView,
    choice_line,
    choices_text,
    prefetch_text,
    tool_calls_text,
)
from picocontext_playground.textreport import record_header
from picocontext_playground.widgets import GREEN, MUTED, RED


class TextPane(QPlainTextEdit):
    """Read-only monospaced text that scrolls; used for diffs and exact inputs."""

    def __init__(self, placeholder: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(monospace_font())
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setPlaceholderText(placeholder)


def _pre(text: str) -> str:
    return (
        '<pre style="font-family: monospace; white-space: pre-wrap; margin: 2px 0 8px 0;">'
        + html.escape(text)
        + "</pre>"
    )


class ContextView(QTextBrowser):
    """Records with role, protection, id and body. Against a reference snapshot, records that
    were deleted (shown struck out, red) or replaced (amber) are highlighted."""

    FOLDED_LINES = 1  # lines of a protected body shown while it is folded

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.document().setDefaultFont(self.font())
        self.mono = monospace_font()
        # Protected prompts are the same in every column; they start folded to one line.
        self.unfolded: set[str] = set()
        self._shown: tuple[str, Snapshot, Snapshot | None, bool] | None = None
        self.anchorClicked.connect(self._toggle)

    def _toggle(self, url: QUrl) -> None:
        if url.scheme() != "fold" or self._shown is None:
            return
        record_id = url.path()
        self.unfolded.symmetric_difference_update({record_id})
        position = self.verticalScrollBar().value()
        self.show_context(*self._shown)
        self.verticalScrollBar().setValue(position)

    def show_context(
        self, title: str, snapshot: Snapshot, reference: Snapshot | None, working: bool
    ) -> None:
        """``working``: show ``snapshot`` with deletions from ``reference`` re-inserted as
        ghosts; otherwise show ``snapshot`` as the transcript, tagging what the working
        context (``reference``) deleted or replaced."""
        self._shown = (title, snapshot, reference, working)
        parts = [
            f"<p><b>{html.escape(title)}</b> · revision {snapshot.revision} · "
            f"{len(snapshot.records)} records</p>"
        ]
        if working and reference is not None:
            before = {r.id: r for r in reference.records}
            live = {r.id for r in snapshot.records}
            pending = list(snapshot.records)
            for prior in reference.records:
                if prior.id not in live:
                    parts.append(self._record_html(prior, "deleted"))
                    continue
                # records that exist only in the working context keep their live position
                while pending and pending[0].id != prior.id and pending[0].id not in before:
                    parts.append(self._record_html(pending.pop(0), "added"))
                if pending and pending[0].id == prior.id:
                    record = pending.pop(0)
                    state = "replaced" if record.body != prior.body else ""
                    parts.append(self._record_html(record, state))
            for record in pending:
                parts.append(self._record_html(record, "added" if record.id not in before else ""))
        else:
            now = {r.id: r for r in reference.records} if reference is not None else None
            for record in snapshot.records:
                state = ""
                if now is not None:
                    if record.id not in now:
                        state = "deleted"
                    elif now[record.id].body != record.body:
                        state = "replaced"
                parts.append(self._record_html(record, state))
        self.setHtml("".join(parts))

    def _record_html(self, record: Record, state: str) -> str:
        head = record_header(record, role_first=True)
        style = "margin: 0;"
        tag = ""
        if state == "deleted":
            style += f" color: {RED}; text-decoration: line-through;"
            tag = f' <span style="color:{RED}; font-weight:bold;">DELETED</span>'
        elif state == "added":
            tag = ' <span style="color:#1b5e9a; font-weight:bold;">NOT IN TRANSCRIPT</span>'
        elif state == "replaced":
            style += " background-color: #fff4cc;"
            tag = ' <span style="color:#8a5a00; font-weight:bold;">REPLACED</span>'
        body = record.body if record.body else "(empty body)"
        lines = body.split("\n")
        fold = ""
        if record.protected and len(lines) > self.FOLDED_LINES:
            link = f"fold:{html.escape(record.id)}"
            if record.id in self.unfolded:
                fold = f' <a href="{link}">fold</a>'
            else:
                body = "\n".join(lines[: self.FOLDED_LINES]) + " \u2026"
                fold = f' <a href="{link}">show all {len(lines):,} lines</a>'
        return (
            f'<div style="{style}"><p style="margin: 6px 0 0 0; color: {MUTED};">'
            f"<b>{html.escape(head)}</b>{tag}{fold}</p>"
            f'<pre style="font-family: {html.escape(self.mono.family())}, monospace; '
            f'white-space: pre-wrap; margin: 2px 0 6px 0; {style}">'
            f"{html.escape(body)}</pre></div>"
        )


class AttemptsView(QTextBrowser):
    """Per step: every decision attempt (outcome, detail, model output, arguments), then the
    answer in full and why a check failed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)

    def show_steps(self, steps: Sequence[StepView], live: tuple[str, str] | None = None) -> None:
        """Every finished step; ``live`` (heading, text so far) is the running step's model
        output, streamed while it generates."""
        parts: list[str] = []
        for step in steps:
            parts.append(f"<h4 style='margin: 8px 0 2px 0;'>{html.escape(step.step_id)}</h4>")
            run = step.run
            if run is None:
                parts.append(f"<p>No turn ran: {html.escape(step.failure or '')}</p>")
                continue
            parts.extend(self._attempts(run))
            parts.append("<p style='margin: 6px 0 0 0;'><b>Answer</b></p>")
            parts.append(_pre(run.answer or "(no answer)"))
            answer_problem = None if step.failure else step.answer_problem
            for problem in (step.failure, step.context_problem, answer_problem):
                if problem:
                    parts.append(f"<p style='color:{RED}; margin: 0;'>{html.escape(problem)}</p>")
        if live is not None:
            heading, text = live
            parts.append(f"<h4 style='margin: 8px 0 2px 0;'>{html.escape(heading)}</h4>")
            parts.append(f"<p style='color:{MUTED}; margin: 0;'>Model output so far:</p>")
            parts.append(_pre(text or "(reading the prompt…)"))
        self.setHtml("".join(parts) or "<p>No decisions.</p>")
        if live is not None:
            bar = self.verticalScrollBar()
            bar.setValue(bar.maximum())

    @staticmethod
    def _attempts(run: RunReport) -> list[str]:
        return [*AttemptsView._prefetched(run), *AttemptsView._own(run)]

    @staticmethod
    def _prefetched(run: RunReport) -> list[str]:
        """What the runtime opened for the model before it read (charged, shown first)."""
        if not run.prefetch_steps:
            return []
        head = f"Before the model read: {prefetch_text(run.prefetch_steps)} (charged)"
        out = [f"<p style='margin: 4px 0 0 0; color:{MUTED};'>{html.escape(head)}</p>"]
        for i, step in enumerate(run.prefetch_steps, start=1):
            out.append(
                f"<p style='margin: 4px 0 0 0;'><b>Prefetch {i}</b> · "
                f"<code>{html.escape(step.name)} {html.escape(step.arguments)}</code></p>"
            )
            out.append(_pre(clip_result(step.result)))
        return out

    @staticmethod
    def _own(run: RunReport) -> list[str]:
        if run.tool_steps:
            return AttemptsView._tool_steps(run)
        if not run.attempts:
            why = no_decision_text(run)
            return [f"<p style='color:{MUTED};'>{html.escape(why[:1].upper() + why[1:])}.</p>"]
        out: list[str] = []
        for i, attempt in enumerate(run.attempts, start=1):
            color = GREEN if attempt.accepted else RED
            out.append(
                f"<p style='margin: 4px 0 0 0;'><b>Attempt {i}</b> · "
                f"<span style='color:{color}; font-weight:bold;'>{attempt.outcome.value}</span>"
                f" · {html.escape(attempt.detail)}</p>"
            )
            out.append("<p style='margin: 2px 0 0 0;'>Model output:</p>")
            out.append(_pre(attempt.model_text or "(no text; tool call only)"))
            out.append("<p style='margin: 2px 0 0 0;'>Arguments:</p>")
            out.append(_pre(attempt.arguments or "(none)"))
        if run.choices:
            # why each pair was decided: the model output above says only "(no call)"
            out.append(f"<p style='margin: 2px 0 0 0;'>Why ({choices_text(run.choices)}):</p>")
            out.append(_pre("\n".join(choice_line(c) for c in run.choices)))
        return out

    @staticmethod
    def _tool_steps(run: RunReport) -> list[str]:
        """Each navigation / digest call: verb, arguments, accepted or refused, the result."""
        out = [f"<p style='margin: 4px 0 0 0;'>{html.escape(tool_calls_text(run.tool_steps))}</p>"]
        for i, step in enumerate(run.tool_steps, start=1):
            color = GREEN if step.ok else RED
            verdict = "ok" if step.ok else "refused"
            out.append(
                f"<p style='margin: 4px 0 0 0;'><b>Call {i}</b> · "
                f"<code>{html.escape(step.name)} {html.escape(step.arguments)}</code> · "
                f"<span style='color:{color}; font-weight:bold;'>{verdict}</span></p>"
            )
            out.append(_pre(clip_result(step.result)))
        return out
