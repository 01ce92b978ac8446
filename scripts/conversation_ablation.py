"""Evidence recall of policy variants on conversations: each ``--variant NAME=KIND:JSON``
(for example ``no-neighbours=retrieval:{"neighbour_weight": 0}``) runs with its own settings
on the deterministic backend at a token window, one line per conversation.

``python scripts/conversation_ablation.py --window 4096 --variant default=retrieval:{}
--variant no-tail=retrieval:{"tail_share": 0} locomo/locomo-26.json``

``--embed-with DIR`` gives every retrieval variant whose settings say ``"embeddings": true``
the mean-pooled hidden states of the MLX model in DIR as its dense ranking (the answers still
come from the deterministic backend), to see whether a hybrid ranking helps.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from picocontext import ModelBackend
from picocontext.models import ByteCounter
from picocontext.policies import ContextPolicy, RetrievalPolicy, RetrievalSettings
from picocontext_diagnostics.backends import DEFAULT_BYTES_PER_TOKEN
from picocontext_diagnostics.conversations.conversation_runner import (
    ConversationRunner,
    PolicyFactory,
    conversation_budget,
)
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)
from picocontext_diagnostics.conversations.format import load_conversation
from picocontext_diagnostics.policies import Policy, create_policy_object


def variant(text: str) -> Policy:
    """``NAME=KIND:JSON`` as a policy named NAME running KIND with the JSON settings."""
    name, _, rest = text.partition("=")
    kind, _, config = rest.partition(":")
    return Policy(name=name, kind=kind, config=json.loads(config or "{}"))


def embedding_factory(model_dir: Path) -> PolicyFactory:
    """Retrieval variants with ``embeddings`` get the MLX model's hidden states."""
    from picocontext.distill import ModelEmbedder
    from picocontext.models.mlx_backend import MLXModel

    embedder = ModelEmbedder(MLXModel.load(model_dir))

    def create(policy: Policy, backend: ModelBackend) -> ContextPolicy:
        if policy.kind == "retrieval" and policy.config.get("embeddings"):
            settings = RetrievalSettings(**{**policy.config, "embeddings": False})
            return RetrievalPolicy(settings, embedder=embedder, name=policy.name)
        return create_policy_object(policy, backend)

    return create


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=int, default=4_096, help="tokens")
    parser.add_argument("--variant", type=variant, action="append", required=True)
    parser.add_argument("--embed-with", type=Path, metavar="DIR")
    parser.add_argument("--questions", type=int, metavar="N", help="only the first N questions")
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args(argv)
    create = embedding_factory(args.embed_with) if args.embed_with else create_policy_object
    budget = conversation_budget(args.window, DEFAULT_BYTES_PER_TOKEN)
    for path in args.files:
        conversation = load_conversation(path)
        runner = ConversationRunner(ByteCounter(), DeterministicConversationBackend(), create)
        report = runner.run(
            conversation,
            args.variant,
            budget,
            questions=args.questions,
            bytes_per_token=DEFAULT_BYTES_PER_TOKEN,
        )
        scores = [*report.summary, *([report.reference] if report.reference else [])]
        recall = ", ".join(f"{s.policy} {s.overall.evidence_recall.mean:.3f}" for s in scores)
        print(f"{conversation.id} ({report.questions_asked} questions): {recall}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
