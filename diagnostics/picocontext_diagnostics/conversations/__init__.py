"""Conversations: compare context policies on sessions of turns with known answers.

* :mod:`.format` — the file format ``picocontext.conversation/1``, its importers and exporter;
* :mod:`.locomo` — the converter from LoCoMo
  (``python -m picocontext_diagnostics.conversations.locomo``);
* :mod:`.extractive_backend` — the deterministic backend that answers by an extractive rule;
* :mod:`.feed` — the records a conversation becomes, and how they are appended;
* :mod:`.scores` — per-question metrics, their aggregates and the report;
* :mod:`.conversation_runner` — every policy over a conversation, then every question;
* :mod:`.command` — ``picocontext eval --conversation FILE``;
* :mod:`.tables` — markdown tables over several reports
  (``python -m picocontext_diagnostics.conversations.tables``).
"""

from picocontext_diagnostics.conversations.conversation_runner import (
    ConversationRunner,
    conversation_budget,
)
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)
from picocontext_diagnostics.conversations.format import (
    Conversation,
    ConversationError,
    Question,
    Session,
    Turn,
    export_messages,
    import_jsonl,
    import_messages,
    load_conversation,
)
from picocontext_diagnostics.conversations.scores import ConversationReport

__all__ = [
    "Conversation",
    "ConversationError",
    "ConversationReport",
    "ConversationRunner",
    "DeterministicConversationBackend",
    "Question",
    "Session",
    "Turn",
    "conversation_budget",
    "export_messages",
    "import_jsonl",
    "import_messages",
    "load_conversation",
]
