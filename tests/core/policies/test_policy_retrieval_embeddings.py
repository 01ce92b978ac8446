"""Retrieval with a dense ranking: fused with BM25, it can pull a turn that shares no word
with the question; asking for model embeddings on a backend without hidden states fails the
turn with a message that says what to do."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from picocontext import ContextSession, Record, Role, RunBudget, Scope, Snapshot
from picocontext.models import ByteCounter
from picocontext.policies import RetrievalPolicy, RetrievalSettings
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
BUDGET = RunBudget(context_window=1_500, completion_output_tokens=100, edit_output_tokens=100)


class TopicEmbedder:
    """Two topics: storage (locker, cabinet) and everything else."""

    embedder_id = "topic-test"
    dims = 2

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [[1.0, 0.0] if ("locker" in t or "cabinet" in t) else [0.0, 1.0] for t in texts]
        return np.asarray(rows, dtype=np.float32)


def session() -> ContextSession:
    filler = "We chatted about trains, rain and the football results for a long while. " * 2
    records = [
        Record(id="task", role=Role.USER, body="Chat with me.", protected=True),
        Record(id="old", role=Role.USER, body="The gym cabinet opens with 4471."),
    ]
    records += [
        Record(id=f"t{i}", role=Role.USER if i % 2 else Role.ASSISTANT, body=f"{i}. {filler}")
        for i in range(12)
    ]
    records.append(Record(id="q", role=Role.USER, body="What is my locker code?", protected=True))
    snapshot = Snapshot(scope=SCOPE, records=tuple(records))
    return ContextSession(snapshot, ByteCounter(), DeterministicConversationBackend())


def test_the_dense_ranking_finds_what_bm25_cannot() -> None:
    lexical = RetrievalPolicy(RetrievalSettings(top_k=2))
    lexical.turn(session(), BUDGET)
    assert lexical.last is not None and "old" not in lexical.last.retrieved_ids
    hybrid = RetrievalPolicy(RetrievalSettings(top_k=2), embedder=TopicEmbedder())
    report = hybrid.turn(session(), BUDGET)
    assert hybrid.last is not None and "old" in hybrid.last.retrieved_ids
    assert report.final_prompt is not None and "4471" in report.final_prompt.rendered


def test_model_embeddings_need_hidden_states() -> None:
    policy = RetrievalPolicy(RetrievalSettings(embeddings=True))
    report = policy.turn(session(), BUDGET)
    assert report.failure is not None and "hidden states" in report.failure
    assert report.calls == ()
