"""Guard policy (§2.13, checklist 28–32) and the default regex redactor (P9 for real text)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from picocontext.distill import GuardInput, GuardResult, GuardStage, RegexGuard, apply_guard
from picocontext.distill.testing import FakeGuard


def _req(text: str) -> GuardInput:
    return GuardInput(stage=GuardStage.INGEST, text=text)


class _Empty:
    version = "empty"

    def guard(self, request: GuardInput) -> GuardResult:
        return GuardResult(text="")


def test_policy_table() -> None:
    assert apply_guard(None, _req("raw"), False).text == "raw"
    failing = FakeGuard(raise_error=True)
    closed = apply_guard(failing, _req("raw"), fail_open=False)
    assert closed.blocked and closed.reason.startswith("guard error (fail-closed):")
    opened = apply_guard(failing, _req("raw 12345"), fail_open=True)
    assert not opened.blocked and opened.text == "raw 12345"
    assert apply_guard(FakeGuard(), _req("a SECRET"), False).blocked
    assert apply_guard(FakeGuard(), _req("pin 12345"), False).text == "pin [REDACTED]"
    assert apply_guard(_Empty(), _req("keep me"), False).text == "keep me"


def test_regex_guard_redacts_emails_keys_and_phones() -> None:
    g = RegexGuard()
    text = (
        "Mail ada.lovelace@example.org or call +44 20 7946 0958. "
        "Key sk-proj-AbCdEf0123456789XyZ and AKIAABCDEFGHIJKLMNOP; password: hunter2hunter2. "
        "Build 2026-11-30 took 15 minutes."
    )
    out = g.guard(_req(text)).text
    assert "ada.lovelace" not in out and "[EMAIL]" in out
    assert "7946" not in out and "[PHONE]" in out
    assert "AbCdEf0123456789" not in out and "AKIAABCDEFGHIJKLMNOP" not in out
    assert "hunter2hunter2" not in out and "password: [KEY]" in out
    assert "2026-11-30" in out and "15 minutes" in out  # dates and small numbers stay


def test_regex_guard_blocks_and_versions() -> None:
    g = RegexGuard(block=[r"(?i)confidential"])
    assert g.guard(_req("CONFIDENTIAL plan")).blocked
    assert g.version != RegexGuard().version
    assert RegexGuard().version == RegexGuard().version


EMAILS = st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,5})?@[a-z]{2,8}\.(com|org|io)", fullmatch=True)


@given(st.text(max_size=40), EMAILS, st.text(max_size=40))
def test_no_email_survives_redaction(before: str, email: str, after: str) -> None:
    out = RegexGuard().redact(f"{before} {email} {after}")
    assert email not in out


@given(st.text(max_size=80))
def test_redaction_is_idempotent(text: str) -> None:
    g = RegexGuard()
    once = g.redact(text)
    assert g.redact(once) == once
    assert not re.search(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+\.[A-Za-z]{2,}", once)
