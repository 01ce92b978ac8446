"""Model resolution: names, pinned revision, hub-cache layout offline, local dirs, fallback."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from picocontext import ModelError
from picocontext.models import registry
from picocontext.models.registry import (
    MODEL_DIR_ENV,
    QWEN3,
    ResolvedModel,
    default_model_name,
    resolve_model,
)

pytest.importorskip("huggingface_hub")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_DIR_ENV, raising=False)
    monkeypatch.delenv(registry.MODEL_ENV, raising=False)


@pytest.fixture()
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def lay_out_as_hub_entry(cache: Path, model_dir: Path, repo_id: str, revision: str) -> Path:
    """The huggingface_hub cache layout: blobs, snapshots/<revision>/, refs/main."""
    entry = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = entry / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (entry / "blobs").mkdir()
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(revision)
    for file in model_dir.iterdir():
        shutil.copy(file, snapshot / file.name)
    return snapshot


def test_pinned_qwen_revision_and_names() -> None:
    assert QWEN3.repo_id == "mlx-community/Qwen3-1.7B-4bit"
    assert QWEN3.revision == "3b1b1768f8f8cf8351c712464f906e86c2b8269e"
    assert set(registry.MODELS) == {
        "qwen3-1.7b-4bit",
        "smollm2-135m",
        "qwen2.5-coder-0.5b",
        "qwen2.5-coder-1.5b",
    }


def test_default_depends_on_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(registry.ENGINE_ENV, raising=False)
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: True)
    assert registry.default_engine() == "mlx"
    assert default_model_name() == QWEN3.name
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: False)
    # the embedded models chosen by measurement per engine (docs/models.md, "Which model")
    assert default_model_name("mlx") == registry.DEFAULT_EMBEDDED_SPEC.name == "qwen2.5-coder-0.5b"
    assert default_model_name("llamacpp") == registry.LLAMACPP_DEFAULT == "qwen2.5-coder-1.5b"


def test_default_engine_is_llamacpp_off_apple_when_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from picocontext.models import llamacpp_backend

    monkeypatch.delenv(registry.ENGINE_ENV, raising=False)
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: False)
    monkeypatch.setattr(llamacpp_backend, "engine_available", lambda: True)
    assert registry.default_engine() == "llamacpp"
    assert registry.engine_notes("llamacpp") == ()
    monkeypatch.setattr(llamacpp_backend, "engine_available", lambda: False)
    assert registry.default_engine() == "mlx"
    (note,) = registry.engine_notes("mlx")
    assert "pip install 'picocontext[llamacpp]'" in note
    monkeypatch.setenv(registry.ENGINE_ENV, "llamacpp")
    assert registry.default_engine() == "llamacpp"
    monkeypatch.setenv(registry.ENGINE_ENV, "cuda")
    with pytest.raises(ModelError, match="Unknown engine 'cuda'; choose one of mlx, llamacpp"):
        registry.default_engine()


def test_mlx_only_model_on_llamacpp_is_one_clear_error() -> None:
    with pytest.raises(ModelError, match=r"is an MLX model; the llama\.cpp engine runs GGUF"):
        resolve_model("qwen3-1.7b-4bit", engine="llamacpp")


def test_llamacpp_directory_must_hold_the_gguf(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"is not a llama\.cpp model directory"):
        resolve_model(model_dir=tmp_path, engine="llamacpp")


def test_repo_id_path_resolves_from_the_hub_cache_offline(hub_cache: Path, tiny_dir: Path) -> None:
    assert QWEN3.repo_id is not None and QWEN3.revision is not None
    snapshot = lay_out_as_hub_entry(hub_cache, tiny_dir, QWEN3.repo_id, QWEN3.revision)
    resolved = resolve_model("qwen3-1.7b-4bit", offline=True)
    assert resolved.path == snapshot
    assert resolved.model_id == QWEN3.repo_id and resolved.revision == QWEN3.revision
    assert resolved.notes == ()


@pytest.mark.mlx
def test_repo_id_path_loads_and_generates_offline(
    hub_cache: Path, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlx_lm")
    from picocontext import ChatMessage

    assert QWEN3.repo_id is not None and QWEN3.revision is not None
    lay_out_as_hub_entry(hub_cache, tiny_dir, QWEN3.repo_id, QWEN3.revision)
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: True)
    model = registry.load_model(prefix_cache=False)
    try:
        assert model.model_id == QWEN3.repo_id and model.revision == QWEN3.revision
        assert model.describe()["modelRevision"] == QWEN3.revision
        assert model.chat([ChatMessage(role="user", content="hi")], 3).generated_tokens == 3
    finally:
        model.close()


def test_explicit_model_missing_offline_names_model_cache_and_local_option(hub_cache: Path) -> None:
    with pytest.raises(ModelError) as err:
        resolve_model("qwen3-1.7b-4bit", offline=True)
    message = err.value.message
    assert "qwen3-1.7b-4bit" in message and QWEN3.repo_id in message  # type: ignore[operator]
    assert str(hub_cache) in message
    assert "--model-dir" in message and MODEL_DIR_ENV in message


def test_default_model_falls_back_to_embedded_and_says_so(
    hub_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: True)
    fake = ResolvedModel(path=tmp_path, model_id="SmolLM2-135M-Instruct", requested="smollm2-135m")
    monkeypatch.setattr(registry, "_embedded", lambda log: fake)
    resolved = resolve_model(offline=True)
    assert resolved.model_id == "SmolLM2-135M-Instruct"
    assert len(resolved.notes) == 1
    assert "default model qwen3-1.7b-4bit could not be had" in resolved.notes[0]
    assert "Using the embedded qwen2.5-coder-0.5b instead" in resolved.notes[0]


def test_explicit_request_never_falls_back(
    hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called: list[Any] = []
    monkeypatch.setattr(registry, "_embedded", lambda log: called.append(log))
    monkeypatch.setenv(registry.MODEL_ENV, "qwen3-1.7b-4bit")
    with pytest.raises(ModelError):
        resolve_model(offline=True)
    assert called == []


def test_local_directory_argument_and_environment(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert resolve_model(model_dir=tiny_dir).path == tiny_dir
    monkeypatch.setenv(MODEL_DIR_ENV, str(tiny_dir))
    resolved = resolve_model()  # the environment's directory beats the default
    assert resolved.path == tiny_dir and resolved.model_id == tiny_dir.name
    # an explicit name beats the environment (it is resolved by name, here: unknown)
    with pytest.raises(ModelError, match="unknown model 'gpt-17'"):
        resolve_model("gpt-17")
    with pytest.raises(ModelError, match="not an MLX model directory"):
        resolve_model(model_dir=tmp_path)


def test_a_file_where_a_model_is_expected_is_named_as_a_file(tmp_path: Path) -> None:
    note = tmp_path / "file.txt"
    note.write_text("not a model", encoding="utf-8")
    with pytest.raises(ModelError, match="is not a directory"):
        resolve_model(model_dir=note)
    with pytest.raises(ModelError, match="is a file, not a model"):
        resolve_model(str(note))
    with pytest.raises(ModelError, match="is a directory, given as a model name"):
        resolve_model(str(tmp_path))


def test_unknown_name_lists_known_models_and_is_bad_input() -> None:
    known = "(qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, qwen3-1.7b-4bit, smollm2-135m)"
    with pytest.raises(ModelError, match=re.escape(known)) as caught:
        resolve_model("gpt-17")
    assert "--model-dir" not in caught.value.message  # not every command has that flag
    assert caught.value.exit_code == 2


def test_importing_models_does_not_import_mlx() -> None:
    import subprocess
    import sys

    code = (
        "import sys, picocontext, picocontext.models as m\n"
        "from picocontext.models import registry, chatformat, constrained, gguf, embedded\n"
        "from picocontext.models import mlx_backend, toolcalls, blas, tiny\n"
        "bad = [k for k in sys.modules if k.split('.')[0] in "
        "('mlx', 'mlx_lm', 'huggingface_hub', 'transformers', 'llguidance')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_kv_shift_on_mlx_is_refused_before_anything_loads() -> None:
    with pytest.raises(ModelError, match=re.escape("KV shift is a llama.cpp setting")):
        registry.load_model("qwen2.5-coder-0.5b", engine="mlx", kv_shift=True)
