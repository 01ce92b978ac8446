"""Errors of :mod:`picocontext.distill`, all under :class:`picocontext.errors.PicoContextError`.

Messages name the node, hash or file involved and what to do about it. Bad settings and
unreadable sources raise the core's :class:`~picocontext.errors.ConfigError` and
:class:`~picocontext.errors.SourceError` (shared with the pcx compiler).
"""

from __future__ import annotations

from picocontext.errors import ConfigError, PicoContextError, SourceError


class DistillError(PicoContextError):
    """Base of every distillation error."""


class NoCorpus(DistillError):
    """A command that reads a corpus was pointed at a directory without one."""

    exit_code = 2

    def __init__(self, corpus: str) -> None:
        super().__init__(f"No corpus at {corpus}; run `picocontext distill sync --docs DIR` first.")
        self.corpus = corpus


class SourceConflict(DistillError):
    """A sync named other sources than the ones the corpus was built from."""

    exit_code = 2


class CorruptBlob(DistillError):
    """A CAS blob's bytes do not hash to its address; it is never served."""

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(
            f"Summary blob {address} is corrupt ({detail}); it was not served. "
            "Run `picocontext-distill repair` then `sync` to rebuild the nodes that use it."
        )
        self.address = address


class MissingBlob(DistillError):
    """A referenced CAS blob does not exist."""

    def __init__(self, address: str) -> None:
        super().__init__(
            f"Summary blob {address} is missing from the store. "
            "Run `picocontext-distill repair` then `sync` to rebuild the nodes that use it."
        )
        self.address = address


class NodeNotFound(DistillError):
    exit_code = 2

    def __init__(self, node_id: str) -> None:
        super().__init__(f'Digest node "{node_id}" not found; call map to list the node ids.')
        self.node_id = node_id


class InvalidHash(DistillError):
    """A SemHash, CAS address or ContentHash string is malformed."""

    exit_code = 2


class InvalidId(DistillError):
    """A digest node id does not have the expected shape."""

    exit_code = 2


class SummarizerError(DistillError):
    """The summarizer failed or produced nothing usable for one node."""


class EmbedderError(DistillError):
    """The embedder returned the wrong number or shape of vectors."""


class ToolCallError(DistillError):
    """A model's map/digest/resolve/recall call had invalid arguments."""

    exit_code = 2


class StoreError(DistillError):
    """The node store could not be opened, read or written."""


__all__ = [
    "ConfigError",
    "CorruptBlob",
    "DistillError",
    "EmbedderError",
    "InvalidHash",
    "InvalidId",
    "MissingBlob",
    "NoCorpus",
    "NodeNotFound",
    "SourceConflict",
    "SourceError",
    "StoreError",
    "SummarizerError",
    "ToolCallError",
]
