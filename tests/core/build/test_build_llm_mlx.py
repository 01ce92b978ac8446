"""The LLM engine on the real MLX path, with a tiny random-weight model: its replies are noise,
so every question fails to parse -- which must degrade (offline fallback, failed grades that
trigger repairs), never crash or pass silently, and the build must still prove every leaf
reachable. About 10 s (tokenizer training and model load); it is the only test here that
touches MLX."""

from __future__ import annotations

from pathlib import Path

import pytest

from picocontext.build.adapters import load_source
from picocontext.build.compiler import BuildOptions, compile_tree
from picocontext.build.engines.llm import LLMEngine


def test_llm_engine_on_a_tiny_mlx_model(corpora: Path, tmp_path: Path) -> None:
    pytest.importorskip("mlx.core")
    from picocontext.models.mlx_backend import MLXModel
    from picocontext.models.tiny import write_tiny_model

    model = MLXModel.load(write_tiny_model(tmp_path / "tiny"))
    engine = LLMEngine(model, max_tokens=16)
    tree = load_source(corpora / "skills", "skills", "s")
    res = compile_tree(tree, engine, BuildOptions(budgets=(4096,)))
    assert engine.calls > 0 and engine.fallbacks > 0
    assert engine.grade_failures > 0  # unreadable grades counted as failures (B17)
    assert res.stats.engine_calls.get("repair_leaf", 0) > 0
    assert res.variants[0].oracle_reachable == 1.0
    assert res.stats.engine.startswith("llm-prompts/1")
