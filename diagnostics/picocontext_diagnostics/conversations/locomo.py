"""Convert LoCoMo (Maharana et al., ACL 2024, "Evaluating Very Long-Term Conversational Memory
of LLM Agents") to ``picocontext.conversation/1``, so our policies are measured on
conversations nobody here wrote.

LoCoMo is not shipped with picocontext (its repository states no licence for the data);
bring the files yourself. Both shapes it is published in are read: ``locomo10.json`` (a list
of samples ``{"sample_id", "conversation": {...}, "qa": [...]}``) and the per-conversation
files of ``locomo10_v2`` (the ``conversation`` object with ``qa`` beside the sessions).

The rules, all of them visible in the output:

* speakers are ``speaker_a`` and ``speaker_b``; ``session_N`` lists become sessions ``sN`` in
  numeric order, their ``session_N_date_time`` (``1:56 pm on 8 May, 2023``) an ISO 8601 date
  and time (a date that does not parse is an error naming the session, never dropped);
* a turn keeps its ``dia_id`` (``D1:3``) as its id; a shared image becomes
  ``[shares a photo: <blip caption>]`` after the text, as LoCoMo's own evaluation shows it;
* a question's ``category`` becomes its kind by the mapping of LoCoMo's evaluation code
  (:data:`CATEGORIES`); category 5 (adversarial: no answer exists) is left out, as the
  published memory systems report it;
* evidence ids are read from their text (``"D8:6; D9:17"`` is two ids); an id that names no
  turn is dropped, and a question left without evidence is skipped. Every drop is counted in
  the :class:`LocomoStats` the converter returns.

``python -m picocontext_diagnostics.conversations.locomo FILE... --out DIR`` writes one
conversation per LoCoMo conversation and prints what it dropped.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from picocontext_diagnostics.conversations.format import (
    FORMAT,
    Conversation,
    ConversationError,
    parse_json,
    read_bounded,
)

# LoCoMo's integer categories, as its evaluation code and the papers that report on it name
# them; 5 (adversarial) has no reference answer and is not converted.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ADVERSARIAL = 5
MAX_LOCOMO_BYTES = 64_000_000
_SESSION = re.compile(r"^session_(\d+)$")
_EVIDENCE = re.compile(r"D\d+:\d+")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y")


@dataclass
class LocomoStats:
    """What a conversion kept and dropped, per reason."""

    questions: int = 0
    adversarial: int = 0
    no_evidence: int = 0
    dropped_evidence: list[str] = field(default_factory=list)


def locomo_date(text: str) -> str:
    """``1:56 pm on 8 May, 2023`` as ``2023-05-08T13:56``."""
    cleaned = " ".join(text.split())
    for pattern in _DATE_FORMATS:
        try:
            moment = datetime.strptime(cleaned, pattern)
        except ValueError:
            continue
        return (
            moment.isoformat(timespec="minutes") if "%I" in pattern else moment.date().isoformat()
        )
    raise ValueError(f"date {text!r} is not in LoCoMo's form, like '1:56 pm on 8 May, 2023'")


def _turn_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text", "")).strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {str(caption).strip()}]".strip()
    return text


def _sessions(conversation: dict[str, Any], where: str) -> list[dict[str, Any]]:
    numbers = sorted(
        int(m.group(1))
        for key, value in conversation.items()
        if (m := _SESSION.match(key)) and isinstance(value, list)
    )
    out = []
    for n in numbers:
        stamp = conversation.get(f"session_{n}_date_time")
        try:
            date = locomo_date(str(stamp)) if stamp else None
        except ValueError as exc:
            raise ConversationError(f"{where}: session_{n}: {exc}") from None
        turns = [
            {"id": str(t["dia_id"]), "speaker": str(t["speaker"]), "text": _turn_text(t)}
            for t in conversation[f"session_{n}"]
            if isinstance(t, dict) and t.get("dia_id") and _turn_text(t)
        ]
        if turns:
            out.append({"id": f"s{n}", **({"date": date} if date else {}), "turns": turns})
    return out


def _questions(qa: Sequence[Any], turn_ids: set[str], stats: LocomoStats) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in qa:
        if not isinstance(item, dict):
            continue
        category = item.get("category")
        if category == ADVERSARIAL or "answer" not in item:
            stats.adversarial += 1
            continue
        found = _EVIDENCE.findall(" ".join(str(e) for e in item.get("evidence", [])))
        evidence = [e for e in dict.fromkeys(found) if e in turn_ids]
        stats.dropped_evidence += [e for e in found if e not in turn_ids]
        if not evidence:
            stats.no_evidence += 1
            continue
        question = {
            "id": f"q{len(out) + 1}",
            "question": str(item["question"]).strip(),
            "answer": str(item["answer"]).strip() or "(empty)",
            "evidence": evidence[:64],
        }
        if category in CATEGORIES:
            question["category"] = CATEGORIES[category]
        out.append(question)
    stats.questions += len(out)
    return out


def convert_sample(sample: dict[str, Any], name: str, stats: LocomoStats) -> Conversation:
    """One LoCoMo sample (either shape) as a conversation named ``locomo-<name>``."""
    conversation = sample.get("conversation", sample)
    if not isinstance(conversation, dict) or "speaker_a" not in conversation:
        raise ConversationError(f"{name}: not a LoCoMo conversation (no speaker_a)")
    sessions = _sessions(conversation, name)
    turn_ids = {t["id"] for s in sessions for t in s["turns"]}
    speakers = list(dict.fromkeys([conversation["speaker_a"], conversation["speaker_b"]]))
    speakers += sorted({t["speaker"] for s in sessions for t in s["turns"]} - set(speakers))
    doc = {
        "format": FORMAT,
        "id": re.sub(r"[^A-Za-z0-9._-]", "-", f"locomo-{name}"),
        "speakers": speakers,
        "sessions": sessions,
        "questions": _questions(sample.get("qa", []), turn_ids, stats),
    }
    try:
        return Conversation.model_validate(doc)
    except ValueError as exc:
        raise ConversationError(f"{name}: {' '.join(str(exc).split())[:400]}") from None


def convert_file(path: Path | str, stats: LocomoStats) -> list[Conversation]:
    """Every conversation of a LoCoMo file (a list of samples, or one conversation)."""
    data = parse_json(read_bounded(path, MAX_LOCOMO_BYTES), str(path))
    if isinstance(data, list):
        return [
            convert_sample(s, str(s.get("sample_id", i)), stats)
            for i, s in enumerate(data)
            if isinstance(s, dict)
        ]
    if isinstance(data, dict):
        return [convert_sample(data, Path(path).stem, stats)]
    raise ConversationError(f"{path}: a LoCoMo file is a list of samples or one conversation")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m picocontext_diagnostics.conversations.locomo",
        description="Convert LoCoMo files to picocontext.conversation/1 (one file each).",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    args = parser.parse_args(argv)
    stats = LocomoStats()
    try:
        conversations = [c for f in args.files for c in convert_file(f, stats)]
        args.out.mkdir(parents=True, exist_ok=True)
        for conversation in conversations:
            (args.out / f"{conversation.id}.json").write_text(conversation.to_json(), "utf-8")
    except (ConversationError, OSError) as exc:
        message = exc.message if isinstance(exc, ConversationError) else str(exc)
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 2
    turns = sum(len(s.turns) for c in conversations for s in c.sessions)
    print(
        f"{len(conversations)} conversations, {turns} turns, {stats.questions} questions "
        f"written to {args.out}; left out: {stats.adversarial} adversarial (category 5), "
        f"{stats.no_evidence} without a usable evidence id; "
        f"{len(stats.dropped_evidence)} evidence ids naming no turn dropped"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
