"""The report as one self-contained web page: verdict, charts and collapsible details.

A person should be able to mail a run to a colleague and have it open anywhere, offline. So the
page has no external asset of any kind: the style and a few lines of sorting script are inline,
the charts are inline SVG drawn here, and every per-step detail sits in a ``<details>`` element
that the browser folds without script. The markup is also well-formed XML (void elements
closed, no named entities), which lets tests parse it strictly.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from picocontext_diagnostics.verdict import Verdict
from picocontext_playground.charts import nice_step
from picocontext_playground.results import ComparisonResult, PolicyOutcome, StepView
from picocontext_playground.runverdict import columns, headline, result_verdict
from picocontext_playground.textreport import attempts_lines, budget_lines, facts_text
from picocontext_playground.widgets import POLICY_COLORS

CHART_WIDTH = 960
CHART_HEIGHT = 300
MUTED = "#5f6368"
RED = "#b3261e"

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #202124; margin: 24px auto;
  max-width: 1240px; padding: 0 16px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; }
.muted { color: #5f6368; }
.headline { font-size: 17px; font-weight: 600; background: #f3f5f7; border-left: 4px solid
  #1b7a3a; padding: 10px 14px; margin: 16px 0; }
.headline.none { border-left-color: #b3261e; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums;
  font-size: 14px; }
th, td { padding: 5px 7px; border-bottom: 1px solid #e0e3e7; text-align: right;
  white-space: nowrap; }
th { cursor: pointer; background: #f3f5f7; user-select: none; }
th.text, td.text { text-align: left; }
td.reason { white-space: normal; text-align: left; min-width: 18em; }
tr.winner td { background: #e3f4e8; font-weight: 600; }
tr.failed td { color: #b3261e; }
details { border: 1px solid #e0e3e7; border-radius: 6px; margin: 6px 0; padding: 4px 10px; }
details details { margin-left: 8px; }
summary { cursor: pointer; font-weight: 600; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f8f9fa; padding: 8px;
  border-radius: 4px; font-size: 12.5px; max-height: 480px; overflow: auto; }
.pass { color: #1b7a3a; } .fail { color: #b3261e; }
svg { max-width: 100%; height: auto; }
"""

# Click a header to sort by its data-key values (numbers numerically); click again to reverse.
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, index) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0];
    var down = th.dataset.order !== "asc";
    th.dataset.order = down ? "asc" : "desc";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[index].dataset.key, y = b.cells[index].dataset.key;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny;
      return down ? c : -c;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
"""


def _e(text: object) -> str:
    """Escaped for text and attribute values; numeric references only (XML-safe)."""
    return escape(str(text), quote=True).replace("&#x27;", "&#39;")


def _color(index: int) -> str:
    return POLICY_COLORS[index % len(POLICY_COLORS)]


# -- verdict ---------------------------------------------------------------------------------
def verdict_table(verdict: Verdict) -> str:
    cols = columns(verdict)
    head = "".join(
        f'<th class="{"" if c.numeric else "text"}" title="{_e(c.tip)}">{_e(c.header)}</th>'
        for c in cols
    )
    rows = []
    for row in verdict.rows:
        kind = "winner" if row.totals.name == verdict.winner else ("" if row.passed else "failed")
        cells = []
        for c in cols:
            cell = c.cell(row)
            css = "" if c.numeric else ("reason" if c.header == "Result" else "text")
            cells.append(f'<td class="{css}" data-key="{_e(cell.key)}">{_e(cell.text)}</td>')
        rows.append(f'<tr class="{kind}" data-policy="{_e(row.totals.name)}">{"".join(cells)}</tr>')
    return (
        f'<table class="sortable" id="verdict"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


# -- charts ------------------------------------------------------------------------------------


def _step_ids(outcomes: Sequence[PolicyOutcome]) -> list[str]:
    ids: list[str] = []
    for outcome in outcomes:
        ids += [s.step_id for s in outcome.steps if s.step_id not in ids]
    planned = max((o.planned_steps for o in outcomes), default=0)
    ids += [f"step-{i}" for i in range(len(ids) + 1, planned + 1)]
    return ids


def _svg_axis(top: int, tick: int, left: int, plot_h: int, width: int) -> list[str]:
    out = []
    for value in range(0, top + 1, tick):
        y = 24 + plot_h - plot_h * value / top
        out.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e0e3e7"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="{MUTED}" '
            f'font-size="11">{value:,}</text>'
        )
    return out


def prompt_chart(result: ComparisonResult) -> str:
    """Per step and policy: a pale bar for the prompt at the start of the turn, a solid one
    for the exact next input, against the dashed context-window line; ✗ where none fit."""
    steps = _step_ids(result.outcomes)
    window = result.budget.context_window
    values = [window] + [
        v for o in result.outcomes for s in o.steps for v in (s.prompt_before, s.prompt_after) if v
    ]
    tick = nice_step(max(values))
    top = (max(values) // tick + 1) * tick
    left, width, plot_h = 64, CHART_WIDTH, CHART_HEIGHT - 70
    parts = _svg_axis(top, tick, left, plot_h, width)
    y_window = 24 + plot_h - plot_h * window / top
    parts.append(
        f'<line x1="{left}" x2="{width - 10}" y1="{y_window:.1f}" y2="{y_window:.1f}" '
        f'stroke="{RED}" stroke-dasharray="6 4"/><text x="{left + 4}" y="{y_window - 4:.1f}" '
        f'fill="{RED}" font-size="11">window {window:,}</text>'
    )
    group = (width - 10 - left) / max(len(steps), 1)
    bar = min(group * 0.8 / max(len(result.outcomes), 1), 60.0)
    for g, step_id in enumerate(steps):
        x0 = left + g * group + (group - bar * len(result.outcomes)) / 2
        for i, outcome in enumerate(result.outcomes):
            found = next((s for s in outcome.steps if s.step_id == step_id), None)
            parts += _bars(found, x0 + i * bar, bar, _color(i), top, plot_h, outcome.label)
        parts.append(
            f'<text x="{left + g * group + group / 2:.1f}" y="{24 + plot_h + 16}" '
            f'text-anchor="middle" font-size="12">{_e(step_id)}</text>'
        )
    parts += _legend([o.label for o in result.outcomes], left, CHART_HEIGHT - 14)
    title = (
        f"Prompt size per step in {result.token_unit}: pale = prompt when the turn started, "
        "solid = the exact next input"
    )
    return _svg(title, parts, CHART_HEIGHT)


def _bars(
    step: StepView | None, x: float, w: float, color: str, top: int, plot_h: int, label: str
) -> list[str]:
    base = 24 + plot_h
    if step is None:
        return [
            f'<text x="{x + w / 2:.1f}" y="{base - 6}" text-anchor="middle" fill="{MUTED}">-</text>'
        ]
    out = []
    for amount, opacity, inset in ((step.prompt_before, 0.3, 0.0), (step.prompt_after, 1.0, 0.18)):
        if amount is None:
            continue
        h = plot_h * amount / top
        out.append(
            f'<rect x="{x + w * inset + 1:.1f}" y="{base - h:.1f}" '
            f'width="{w - 2 * w * inset - 2:.1f}" '
            f'height="{h:.1f}" fill="{color}" fill-opacity="{opacity}">'
            f"<title>{_e(label)} {_e(step.step_id)}: {amount:,}</title></rect>"
        )
    if step.prompt_after is None:
        out.append(
            f'<text x="{x + w / 2:.1f}" y="{base - 6}" text-anchor="middle" fill="{RED}" '
            'font-weight="bold">\u2717</text>'
        )
    return out


def _legend(labels: Sequence[str], x: float, y: float) -> list[str]:
    out = []
    for i, label in enumerate(labels):
        out.append(
            f'<rect x="{x:.1f}" y="{y - 10}" width="14" height="10" fill="{_color(i)}"/>'
            f'<text x="{x + 20:.1f}" y="{y}" font-size="12">{_e(label)}</text>'
        )
        x += 40 + 7.5 * len(label)
    return out


def work_chart(result: ComparisonResult, verdict: Verdict) -> str:
    """Model work per policy (prefill computed + generated), ranked as in the verdict."""
    rows = verdict.rows
    height = 40 + 30 * len(rows)
    top = max((r.totals.model_work for r in rows), default=0) or 1
    left, right = 130, CHART_WIDTH - 130
    order = [o.policy.name for o in result.outcomes]
    parts = []
    for i, row in enumerate(rows):
        t = row.totals
        y = 28 + i * 30
        w = (right - left) * t.model_work / top
        color = _color(order.index(t.name)) if t.name in order else MUTED
        mark = "" if row.passed else " \u2717"
        parts.append(
            f'<text x="{left - 8}" y="{y + 15}" text-anchor="end" font-size="12">'
            f"{_e(t.label)}{mark}</text>"
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="20" fill="{color}"/>'
            f'<text x="{left + w + 6:.1f}" y="{y + 15}" font-size="12">{t.model_work:,}</text>'
        )
    title = f"Model work per policy in {verdict.token_unit}: prefill computed plus generated"
    return _svg(title, parts, height)


def _svg(title: str, parts: Sequence[str], height: int) -> str:
    return (
        f'<figure><svg role="img" viewBox="0 0 {CHART_WIDTH} {height}" width="{CHART_WIDTH}" '
        f'height="{height}" font-family="system-ui, sans-serif"><title>{_e(title)}</title>'
        f'{"".join(parts)}</svg><figcaption class="muted">{_e(title)}</figcaption></figure>'
    )


# -- details -----------------------------------------------------------------------------------
def _mark(ok: bool) -> str:
    return '<span class="pass">\u2713</span>' if ok else '<span class="fail">\u2717</span>'


def _pre(text: str) -> str:
    return f"<pre>{_e(text)}</pre>"


def step_details(step: StepView, unit: str) -> str:
    size = (
        f"{step.prompt_before or 0:,} \u2192 {step.prompt_after:,}"
        if step.prompt_after
        else "none fit"
    )
    summary = (
        f"{_e(step.step_id)} \u00b7 context {_mark(step.context_passed)} \u00b7 answer "
        f"{_mark(step.answer_passed)} \u00b7 prompt {size}"
    )
    body = [
        f"<p>Expected <code>{_e(facts_text(step.expected))}</code><br/>"
        f"Retained <code>{_e(facts_text(step.retained))}</code></p>"
    ]
    problems = [p for p in (step.failure, step.context_problem, step.answer_problem) if p]
    if problems:
        body.append(f'<p class="fail">{_e("; ".join(dict.fromkeys(problems)))}</p>')
    run = step.run
    if run is not None:
        body.append(
            f"<p>Answer <code>{_e(run.answer or '(none)')}</code><br/>Input "
            f"{run.total_input_tokens:,} \u00b7 generated {run.total_generated_tokens:,} \u00b7 "
            f"prefill computed {run.total_prefill_tokens:,} {_e(unit)} \u00b7 calls "
            f"{len(run.calls)} \u00b7 {run.elapsed_seconds:.3f} s</p>"
        )
        body.append(_fold("Decisions and tool calls", _pre("\n".join(attempts_lines(run)))))
        body.append(_fold("Diff", _pre(run.diff or "(no edit committed)")))
        if run.final_prompt is not None:
            label = f"Exact next input ({run.final_prompt.token_count:,} {unit})"
            body.append(_fold(label, _pre(run.final_prompt.rendered)))
    return f"<details><summary>{summary}</summary>{''.join(body)}</details>"


def _fold(label: str, inner: str) -> str:
    return f"<details><summary>{_e(label)}</summary>{inner}</details>"


def policy_details(outcome: PolicyOutcome, unit: str) -> str:
    state = "passed every check" if outcome.passed else (outcome.failure or "failed a check")
    steps = "".join(step_details(s, unit) for s in outcome.steps)
    missing = outcome.planned_steps - len(outcome.steps)
    if missing > 0:
        steps += f'<p class="muted">{missing} later step(s) did not run after the failure.</p>'
    return (
        f'<details class="policy"><summary>{_e(outcome.label)} \u00b7 {_mark(outcome.passed)} '
        f"{_e(state)}</summary>{steps}</details>"
    )


# -- page --------------------------------------------------------------------------------------
def render_html(result: ComparisonResult) -> str:
    """The whole page (UTF-8 text, no external reference)."""
    verdict = result_verdict(result)
    unit = result.token_unit
    css = "headline" if verdict.winner else "headline none"
    sections = [
        "<h1>PicoContext playground report</h1>",
        f'<p class="muted">{_e(result.settings.describe())}<br/>Model: '
        f"{_e(result.model_label)} ({_e(result.model_id)}) \u00b7 engine: "
        f"{_e(result.engine_label)} \u00b7 greedy sampling \u00b7 "
        f"counts in {_e(unit)}<br/>{_e(' · '.join(budget_lines(result)))}</p>",
        f'<p class="{css}" id="sentence">{_e(headline(result, verdict))}</p>',
        "<h2>Verdict</h2>",
        verdict_table(verdict),
        '<p class="muted">Click a column header to sort. The highlighted row is the '
        "cheapest policy that passed every check.</p>",
        "<h2>Charts</h2>",
        prompt_chart(result),
        work_chart(result, verdict),
        "<h2>Per step</h2>",
        *(policy_details(o, unit) for o in result.outcomes),
        f'<p class="muted">Run {"stopped before the end" if result.cancelled else "completed"}'
        f" in {result.elapsed_seconds:.3f} s.</p>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
        f"<title>PicoContext report \u00b7 {_e(result.title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(sections)}"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


__all__ = ["policy_details", "prompt_chart", "render_html", "step_details", "verdict_table"]
