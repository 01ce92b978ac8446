"""An evaluation spread over two servers, one of which fails at random, runs to the end:
retried faults recover, an episode that still fails is recorded with its reason, the other
server keeps working, and every finished result is in the report."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from openai_stub import Reply, Stub, completion_events, serve_stub
from picocontext.models import OpenAIBackend
from picocontext.models import openai_backend as openai_module
from picocontext.models.remote_http import ClientSettings
from picocontext.models.tiny import write_tiny_model
from picocontext_diagnostics.backends import openai_backend, provenance
from picocontext_diagnostics.evaluation import EvaluationConfig, EvaluationRunner

MODEL = "stub-model"
# Bounded: two retries without backoff, short timeouts, so the whole run takes seconds.
FAST = ClientSettings(connect_timeout=2.0, read_timeout=3.0, retries=2, backoff=0.0)
ANSWER = '{"facts": {}}'


def good() -> Reply:
    return Reply(events=completion_events(ANSWER, prompt_tokens=None, completion_tokens=None))


def faulty_replies(count: int, seed: int) -> list[Reply]:
    """Good answers with random faults: 5xx, a stream cut mid-answer, a body that is not
    SSE. Runs of six faults in a row make some requests fail: two episodes may ask this
    server at once, and each takes at most two faults before its third attempt, so five in a
    row defeat the retries whatever the interleaving (a run of three did only when a
    request's first attempt met its first fault, which two workers do not guarantee)."""
    rng = random.Random(seed)
    faults = [
        Reply(status=500),
        Reply(status=503),
        Reply(
            events=completion_events(ANSWER, prompt_tokens=None, completion_tokens=None), cut=True
        ),
        Reply(raw=b"<html>bad gateway</html>", status=502),
    ]
    burst = 6
    replies: list[Reply] = [good(), *(rng.choice(faults) for _ in range(burst))]
    while len(replies) < count:
        if rng.random() < 0.15:
            replies.extend(rng.choice(faults) for _ in range(burst))  # beyond the retries
        elif rng.random() < 0.4:
            replies.append(rng.choice(faults))  # one retry recovers it
        else:
            replies.append(good())
    return [*replies[:count], good()]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-format model's folder: its tokenizer renders and counts the prompts."""
    return write_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture
def servers() -> Iterator[tuple[Stub, Stub]]:
    models = [{"id": MODEL, "object": "model", "owned_by": "organization_owner"}]
    healthy = Stub(models=models, replies=[good()])
    failing = Stub(models=models, replies=faulty_replies(400, seed=11))
    healthy_server = serve_stub(healthy)
    failing_server = serve_stub(failing)
    next(healthy_server)
    next(failing_server)
    yield healthy, failing
    for server in (healthy_server, failing_server):
        with pytest.raises(StopIteration):
            next(server)


def test_a_run_over_two_servers_with_one_failing_at_random_completes(
    servers: tuple[Stub, Stub], tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy, failing = servers
    monkeypatch.setattr(openai_module, "ClientSettings", lambda: FAST)
    # What `picocontext eval --backend openai --base-url A --base-url B` builds.
    handle = openai_backend((healthy.base_url, failing.base_url), MODEL, str(tiny_dir))
    backends = [backend for backend, _ in handle.pool]
    assert all(isinstance(b, OpenAIBackend) for b in backends)
    config = EvaluationConfig(
        seeds=(1, 2, 3, 4), repetitions=1, step_count=2, policies=("append-only", "sliding-window")
    )
    runner = EvaluationRunner(
        config, handle.counter, handle.backend, provenance(handle), workers=2, pool=handle.pool
    )
    report = runner.run()
    assert len(report.results) == config.planned_runs()  # nothing finished is lost
    on_failing = [r for r in report.results if (r.order - 1) % 2 == 1]
    on_healthy = [r for r in report.results if (r.order - 1) % 2 == 0]
    # The healthy server's episodes never saw a transport failure.
    assert all("server" not in (s.failure or "") for r in on_healthy for s in r.steps)
    # Some request on the failing server exhausted its retries: named, not hidden.
    reasons = [s.failure for r in on_failing for s in r.steps if s.failure]
    assert reasons, "the fault script should defeat the retries at least once"
    assert all(reason.strip() for reason in reasons)
    assert (
        cast(OpenAIBackend, backends[1]).describe()["retries"] > 0
    )  # and other faults were retried away
    assert cast(OpenAIBackend, backends[0]).describe()["retries"] == 0
    assert len(failing.bodies) > len(on_failing)  # retries reached the server
