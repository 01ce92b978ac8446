"""The scripted stand-in routes each prompt to the deterministic model of its task (the order
rules themselves are tested in tests/diagnostics/test_diagnostics_order_task.py)."""

from __future__ import annotations

import json

from picocontext import (
    ModelInput,
    Phase,
)
from picocontext.models import ByteCounter
from picocontext_diagnostics import order_lookup
from picocontext_playground.scripted import ScriptedPlaygroundBackend


def test_notebook_prompts_are_delegated() -> None:
    from picocontext_diagnostics import Scenario, fixture_episode

    episode = fixture_episode(Scenario.RETENTION)
    backend = ScriptedPlaygroundBackend(order_lookup())
    snapshot = episode.initial.model_copy(
        update={"records": episode.initial.records + episode.steps[0].records}
    )
    prompt = ByteCounter().prepare(ModelInput(context=snapshot, phase=Phase.COMPLETION))
    answer = backend.generate(prompt, 10_000)
    assert json.loads(answer.text) == {"facts": episode.steps[0].expected_facts}


def test_order_prompts_follow_the_order_rules() -> None:
    order = order_lookup()
    backend = ScriptedPlaygroundBackend(order)
    prompt = ByteCounter().prepare(ModelInput(context=order.snapshot, phase=Phase.COMPLETION))
    assert order.answer_is_correct(backend.generate(prompt, 10_000).text)
    assert backend.model_id == "scripted-deterministic" and backend.calls == 1
