"""Fixtures shared by the diagnostics tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's tiny random-weight Qwen2 GGUF installed as a llama.cpp model directory
    (skipped without the llama.cpp extra)."""
    pytest.importorskip("xllamacpp")
    pytest.importorskip("transformers")
    from picocontext.models.gguf import install_gguf
    from picocontext.models.tiny import TINY_CHAT_TEMPLATE, write_tiny_gguf

    work = tmp_path_factory.mktemp("engines-bench")
    write_tiny_gguf(work / "tiny.gguf", arch="qwen2", context=12_288)
    return install_gguf(work / "tiny.gguf", work / "model", chat_template=TINY_CHAT_TEMPLATE)
