"""A corpus's stored configuration made into a running distiller, for the distill commands.

The configuration ``picocontext distill sync`` stored in the corpus (under
:data:`CONFIG_KEY`) names the summarizer, the embedder, the guard and the sources; this module
builds each of them (a local model is loaded once and shared, and only when a command needs
it), opens the distiller over the corpus, and hands back everything that must be closed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from picocontext.distill.config import DistillConfig, whitespace_tokens
from picocontext.distill.distiller import Distiller
from picocontext.distill.embedder import Embedder, LexicalEmbedder
from picocontext.distill.errors import ConfigError, SourceError
from picocontext.distill.guard import Guard, RegexGuard
from picocontext.distill.sources import ConversationSource, DocumentFolderSource, SourceAdapter
from picocontext.distill.store import NodeStore
from picocontext.distill.summarizer import ChatSummarizer, Summarizer
from picocontext.errors import PicoContextError

CONFIG_KEY = "cli_config"


def load_config(store: NodeStore) -> dict[str, Any]:
    raw = store.meta_get(CONFIG_KEY)
    return dict(json.loads(raw)) if raw else {}


class ModelSlot:
    """Loads the configured local model at most once, so the summarizer and the embedder
    share one set of weights (and one worker thread)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config
        self._model: Any = None

    def get(self, purpose: str) -> Any:
        if self._model is None:
            name = self._config.get("model")
            if not name:
                raise ConfigError(
                    f"{purpose} needs --model NAME_OR_DIR (a known model such as smollm2-135m, "
                    "or an MLX model directory)."
                )
            try:
                from picocontext.models.registry import load_model
            except ImportError as exc:  # pragma: no cover - the registry itself is core
                raise ConfigError(f"{purpose} needs the model registry: {exc}") from exc
            directory = model_directory(str(name))
            try:
                if directory is not None:
                    self._model = load_model(model_dir=directory)
                else:
                    self._model = load_model(str(name))
            except ImportError as exc:
                raise ConfigError(
                    f"{purpose} needs the mlx extra (pip install 'picocontext[mlx]'): {exc}"
                ) from exc
        return self._model

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
            self._model = None


def model_directory(name: str) -> Path | None:
    """``--model``'s directory, None for a model name; a path that is not a directory is
    refused by name (a name never contains a path separator)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists() or os.sep in name or (os.altsep and os.altsep in name):
        what = "is not a directory" if path.exists() else "does not exist"
        raise ConfigError(
            f"--model {name} {what}; pass an MLX model directory or a known model name "
            "such as smollm2-135m."
        )
    return None


def summarizer_for(config: dict[str, Any], models: ModelSlot) -> Summarizer:
    if config.get("summarizer", "fake") == "fake":
        from picocontext.distill.testing import FakeSummarizer

        return FakeSummarizer()
    model = models.get("--summarizer model")
    return ChatSummarizer(model, quantization=str(config.get("quantization", "")))


def embedder_for(config: dict[str, Any], models: ModelSlot) -> Embedder:
    if config.get("embedder", "lexical") == "model":
        from picocontext.distill.embedder import ModelEmbedder

        return ModelEmbedder(models.get("--embedder model"))
    return LexicalEmbedder(dims=int(config.get("dims", 256)))


def guard_for(config: dict[str, Any]) -> Guard | None:
    return RegexGuard() if config.get("guard", "regex") == "regex" else None


def adapters_for(config: dict[str, Any], closers: list[Callable[[], None]]) -> list[SourceAdapter]:
    """The configured sources; session stores are opened read-only (a source is never
    written to) and their ``close`` is added to ``closers``."""
    from picocontext.persistence import SQLiteStore

    adapters: list[SourceAdapter] = []
    for folder in config.get("docs", []):
        adapters.append(DocumentFolderSource(folder))
    for i, db in enumerate(config.get("sessions", [])):
        try:
            store = SQLiteStore(db, read_only=True)
        except PicoContextError as exc:
            raise SourceError(f"--sessions: {exc.message}") from None
        closers.append(store.close)
        adapters.append(ConversationSource(store, source_kind=f"turn{i or ''}"))
    return adapters


class OpenedCorpus:
    """A distiller over its sources, the model slot it uses, and what closing them takes."""

    def __init__(
        self,
        distiller: Distiller,
        adapters: list[SourceAdapter],
        models: ModelSlot,
        closers: list[Callable[[], None]],
    ) -> None:
        self.distiller = distiller
        self.adapters = adapters
        self.models = models
        self._closers = closers

    def close(self) -> None:
        self.distiller.close()
        for close in reversed(self._closers):
            close()


def open_distiller(
    corpus: Path, config: dict[str, Any], models: ModelSlot | None = None
) -> OpenedCorpus:
    """The distiller over the configured sources; ``models`` shares an already opened model
    slot (the query path's, which its owner closes), otherwise a new one is closed with the
    rest. Sources and models are checked before the corpus folder is created."""
    closers: list[Callable[[], None]] = []
    try:
        return open_corpus(corpus, config, models, closers)
    except BaseException:
        for close in reversed(closers):
            close()
        raise


def open_corpus(
    corpus: Path,
    config: dict[str, Any],
    models: ModelSlot | None,
    closers: list[Callable[[], None]],
) -> OpenedCorpus:
    adapters = adapters_for(config, closers)
    if models is None:
        models = ModelSlot(config)
        closers.append(models.close)
    summarizer = summarizer_for(config, models)
    tokenizer = whitespace_tokens
    tokenizer_id = "whitespace-words"
    if isinstance(summarizer, ChatSummarizer):
        tokenizer = summarizer.count_tokens
        tokenizer_id = "model:" + summarizer.summarizer_id
    embedder = embedder_for(config, models)
    distiller = Distiller.open(
        corpus,
        summarizer,
        embedder,
        guard=guard_for(config),
        config=DistillConfig(
            recipe_version=str(config.get("recipe", "")),
            corpus=corpus.name,
            budget=int(config.get("budget", DistillConfig().budget)),
        ),
        tokenizer=tokenizer,
        tokenizer_id=tokenizer_id,
        adapter_versions=[a.version for a in adapters],
    )
    return OpenedCorpus(distiller, adapters, models, closers)
