"""picocontext — context engineering for small local language models.

The core library: editable context (records, edits, validation, sessions, durable stores),
and the model-independent protocols the other capabilities build on. It never imports Qt, and
imports MLX only when a real model is loaded.
"""

from picocontext.backend import (
    ChatMessage,
    ChatModel,
    EditStyle,
    ModelBackend,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    TokenCounter,
    ToolSpec,
    tools_json,
)
from picocontext.budget import RunBudget, Usage, scale_tokens
from picocontext.cancel import CancelToken
from picocontext.edits import (
    EDIT_TOOL,
    KEEP_TOOL,
    AppendTransaction,
    Delete,
    Edit,
    Operation,
    Replace,
    decode_edit_payload,
    decode_keep_payload,
    edit_payload,
    keep_payload,
)
from picocontext.errors import (
    BudgetExceeded,
    Busy,
    Cancelled,
    ContextError,
    DuplicateOperation,
    EditLimit,
    IncompleteToolGroup,
    InvalidContext,
    ModelDidNotEdit,
    ModelError,
    PicoContextError,
    ProtectedRecord,
    ScopeMismatch,
    StaleRevision,
    StorageError,
    UnknownRecord,
)
from picocontext.files import InputFileError, read_bounded, read_text_bounded
from picocontext.persistence import ContextStore, InMemoryStore, SQLiteStore
from picocontext.records import Record, Role, Scope, Snapshot, ToolCall
from picocontext.report import EditAttempt, Outcome, RunMode, RunReport, ToolStep, diff_snapshots
from picocontext.session import ContextSession
from picocontext.working import WorkingContext, validate_snapshot

__version__ = "0.1.0"

__all__ = [
    "EDIT_TOOL",
    "KEEP_TOOL",
    "AppendTransaction",
    "BudgetExceeded",
    "Busy",
    "CancelToken",
    "Cancelled",
    "ChatMessage",
    "ChatModel",
    "ContextError",
    "ContextSession",
    "ContextStore",
    "Delete",
    "DuplicateOperation",
    "Edit",
    "EditAttempt",
    "EditLimit",
    "EditStyle",
    "InMemoryStore",
    "IncompleteToolGroup",
    "InputFileError",
    "InvalidContext",
    "ModelBackend",
    "ModelDidNotEdit",
    "ModelError",
    "ModelInput",
    "ModelResponse",
    "ModelToolCall",
    "Operation",
    "Outcome",
    "Phase",
    "PicoContextError",
    "PreparedPrompt",
    "ProtectedRecord",
    "Record",
    "Replace",
    "Role",
    "RunBudget",
    "RunMode",
    "RunReport",
    "SQLiteStore",
    "Scope",
    "ScopeMismatch",
    "Snapshot",
    "StaleRevision",
    "StorageError",
    "TokenCounter",
    "ToolCall",
    "ToolSpec",
    "ToolStep",
    "UnknownRecord",
    "Usage",
    "WorkingContext",
    "__version__",
    "decode_edit_payload",
    "decode_keep_payload",
    "diff_snapshots",
    "edit_payload",
    "keep_payload",
    "read_bounded",
    "read_text_bounded",
    "scale_tokens",
    "tools_json",
    "validate_snapshot",
]
