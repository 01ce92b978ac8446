"""Embedded names in the model registry, and fast failure when the hub cannot be reached."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from picocontext import ModelError
from picocontext.models import embedded, netprobe, registry
from picocontext.models.registry import MODELS, ResolvedModel, resolve_model

pytest.importorskip("huggingface_hub")


@pytest.fixture
def blackholed_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An empty hub cache, online mode, and connections that hang; records any download."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv(registry.MODEL_DIR_ENV, raising=False)
    monkeypatch.delenv(registry.MODEL_ENV, raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    downloads: list[str] = []

    def snapshot_download(repo_id: str, **kwargs: Any) -> str:
        if kwargs.get("local_files_only"):
            raise LocalEntryNotFoundError("not cached")
        downloads.append(repo_id)
        raise OSError("the test hub is unreachable")

    def hang(*args: Any, **kwargs: Any) -> socket.socket:
        time.sleep(30)
        raise OSError("timed out")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(socket, "create_connection", hang)
    return downloads


def test_a_hub_model_fails_in_seconds_with_one_clear_line(blackholed_hub: list[str]) -> None:
    started = time.perf_counter()
    with pytest.raises(ModelError) as caught:
        resolve_model("qwen3-1.7b-4bit")
    assert time.perf_counter() - started < 3.0
    message = caught.value.message
    assert "\n" not in message
    assert "huggingface.co cannot be reached" in message and "--model-dir" in message
    assert blackholed_hub == []  # huggingface_hub's retrying download never started


def test_the_default_falls_back_to_the_embedded_model_fast_and_says_so(
    blackholed_hub: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: True)  # default = hub model
    fake = ResolvedModel(path=tmp_path, model_id="SmolLM2-135M-Instruct", requested="smollm2-135m")
    monkeypatch.setattr(registry, "_embedded", lambda log, name="smollm2-135m": fake)
    started = time.perf_counter()
    resolved = resolve_model()
    assert time.perf_counter() - started < 3.0
    assert resolved.path == tmp_path
    assert len(resolved.notes) == 1
    assert "qwen3-1.7b-4bit could not be had" in resolved.notes[0]
    assert "embedded qwen2.5-coder-0.5b" in resolved.notes[0]


def test_embedded_names_resolve_through_their_specs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[str] = []

    def ensure(name: str, **kwargs: Any) -> Path:
        asked.append(name)
        return tmp_path

    monkeypatch.setattr(embedded, "ensure_embedded_model", ensure)
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"):
        assert MODELS[name].source == "embedded"
        resolved = resolve_model(name)
        spec = embedded.SPECS[name]
        assert resolved.model_id == spec.title and resolved.requested == name
        assert resolved.revision is not None and spec.gguf_sha256[:16] in resolved.revision
    assert asked == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"]
    assert MODELS["qwen2.5-coder-1.5b"].approx_mb == 1093


def test_the_probe_connects_to_a_listening_port_and_gives_up_on_a_silent_one() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert netprobe.reachable("127.0.0.1", port, timeout=2.0)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]
    assert not netprobe.reachable("127.0.0.1", free, timeout=2.0)
    assert not netprobe.reachable("", 443)


def test_a_hanging_connection_is_abandoned_at_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hang(*args: Any, **kwargs: Any) -> socket.socket:
        release.wait(10)
        raise OSError("never")

    monkeypatch.setattr(socket, "create_connection", hang)
    started = time.perf_counter()
    assert not netprobe.reachable("example.invalid", 443, timeout=0.3)
    assert time.perf_counter() - started < 1.5
    release.set()


def test_the_probe_goes_to_the_https_proxy_when_one_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    assert netprobe.probe_target("https://huggingface.co") == ("huggingface.co", 443)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert netprobe.probe_target("https://huggingface.co") == ("proxy.internal", 3128)
