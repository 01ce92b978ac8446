"""The engine choice (MLX or llama.cpp) end to end in the playground: settings, the command
line, the loader, the window's picker and every report. The real llama.cpp path runs on a tiny
random-weight GGUF written by the suite (seconds, no download)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from picocontext import Cancelled, CancelToken
from picocontext.models.llamacpp_backend import INSTALL_HINT
from picocontext_playground import cli
from picocontext_playground.comparison import PrintEvents, run_comparison
from picocontext_playground.errors import SetupError
from picocontext_playground.htmlreport import render_html
from picocontext_playground.jsonreport import render_json
from picocontext_playground.model_loader import (
    LoadedModel,
    ModelCache,
    check_directory_engine,
    load_model,
    scripted_model,
)
from picocontext_playground.results import ComparisonResult
from picocontext_playground.settings import (
    ComparisonSettings,
    ModelChoice,
    Task,
    engine_for,
    engine_label,
)
from picocontext_playground.textreport import render_report
from picocontext_playground.window import MainWindow

ENGINE_ENV = "PICOCONTEXT_ENGINE"


def parse(*argv: str) -> ComparisonSettings:
    return cli.settings_from_args(cli.build_parser().parse_args(list(argv)))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (cli.REPORT_ENV, cli.IMAGE_ENV, cli.MODEL_DIR_ENV, ENGINE_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_llamacpp(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the llamacpp extra were not installed (off Apple silicon)."""
    from picocontext.models import llamacpp_backend, registry

    monkeypatch.setattr(llamacpp_backend, "engine_available", lambda: False)
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: False)


@pytest.fixture
def with_llamacpp(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the llamacpp extra were installed, off Apple silicon (the Linux default)."""
    from picocontext.models import llamacpp_backend, registry

    monkeypatch.setattr(llamacpp_backend, "engine_available", lambda: True)
    monkeypatch.setattr(registry, "is_apple_silicon", lambda: False)


def gguf_layout(directory: Path) -> Path:
    """A directory that looks like the llama.cpp layout (enough for layout checks)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("model.gguf", "config.json", "tokenizer_config.json"):
        (directory / name).write_text("{}", encoding="utf-8")
    return directory


def mlx_layout(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text("{}", encoding="utf-8")
    return directory


# -- settings ----------------------------------------------------------------------------------
def test_the_default_engine_is_the_registrys(
    with_llamacpp: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ComparisonSettings(model=ModelChoice.QWEN25_15).engine == "llamacpp"
    monkeypatch.setenv(ENGINE_ENV, "mlx")
    assert ComparisonSettings(model=ModelChoice.QWEN25_15).engine == "mlx"


def test_without_the_extra_the_default_engine_is_mlx(no_llamacpp: None) -> None:
    assert ComparisonSettings(model=ModelChoice.QWEN25_05).engine == "mlx"


def test_an_mlx_only_model_defaults_to_mlx_and_refuses_llamacpp(with_llamacpp: None) -> None:
    assert ComparisonSettings(model=ModelChoice.QWEN3).engine == "mlx"
    with pytest.raises(
        ValueError, match=re.escape("is an MLX model; the llama.cpp engine runs GGUF")
    ):
        ComparisonSettings(model=ModelChoice.QWEN3, engine="llamacpp")


def test_a_directory_layout_chooses_its_engine(with_llamacpp: None, tmp_path: Path) -> None:
    mlx_dir, gguf_dir = mlx_layout(tmp_path / "mlx"), gguf_layout(tmp_path / "gguf")
    assert engine_for(ModelChoice.DIRECTORY, mlx_dir) == "mlx"
    assert engine_for(ModelChoice.DIRECTORY, gguf_dir) == "llamacpp"
    assert engine_for(ModelChoice.DIRECTORY, tmp_path) == "llamacpp"  # unknown: the default
    chosen = ComparisonSettings(model=ModelChoice.DIRECTORY, model_dir=mlx_dir)
    assert chosen.engine == "mlx"


def test_settings_saved_before_the_engine_choice_still_load(with_llamacpp: None) -> None:
    old = {"task": "retention", "policies": ["append-only"], "model": "qwen3-1.7b-4bit"}
    assert ComparisonSettings.model_validate(old).engine == "mlx"
    embedded = {**old, "model": "qwen2.5-coder-0.5b"}
    assert ComparisonSettings.model_validate(embedded).engine == "llamacpp"


def test_saved_settings_keep_the_engine(with_llamacpp: None) -> None:
    settings = ComparisonSettings(model=ModelChoice.QWEN25_05, engine="mlx")
    again = ComparisonSettings.model_validate_json(settings.model_dump_json())
    assert again == settings and again.engine == "mlx"
    assert json.loads(settings.model_dump_json())["engine"] == "mlx"


def test_describe_names_the_engine_of_a_real_model() -> None:
    assert (
        "engine: llama.cpp"
        in ComparisonSettings(model=ModelChoice.QWEN25_05, engine="llamacpp").describe()
    )
    assert "engine" not in ComparisonSettings(model=ModelChoice.SCRIPTED).describe()


def test_engine_labels() -> None:
    assert [engine_label(k) for k in ("mlx", "llamacpp", "scripted", "other")] == [
        "MLX",
        "llama.cpp",
        "scripted rules (no model)",
        "other",
    ]


# -- command line ------------------------------------------------------------------------------
def test_backend_llamacpp_defaults_to_its_model(with_llamacpp: None) -> None:
    settings = parse("--episode-smoke", "retention", "--backend", "llamacpp")
    assert settings.engine == "llamacpp" and settings.model is ModelChoice.QWEN25_15
    named = parse("--smoke", "--backend", "llamacpp", "--model", "qwen2.5-coder-0.5b")
    assert named.engine == "llamacpp" and named.model is ModelChoice.QWEN25_05


def test_without_backend_the_default_engine_and_its_model(with_llamacpp: None) -> None:
    settings = parse("--smoke")
    assert settings.engine == "llamacpp" and settings.model is ModelChoice.QWEN25_15


def test_backend_mlx_defaults_to_the_mlx_cpu_model(with_llamacpp: None) -> None:
    settings = parse("--smoke", "--backend", "mlx")
    assert settings.engine == "mlx" and settings.model is ModelChoice.QWEN25_05


def test_an_mlx_only_model_without_backend_runs_on_mlx(with_llamacpp: None) -> None:
    assert parse("--smoke", "--model", "qwen3-1.7b-4bit").engine == "mlx"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "llamacpp", "--model", "qwen3-1.7b-4bit"], "is an MLX model"),
        (["--backend", "scripted", "--model", "qwen2.5-coder-0.5b"], "uses no model"),
        (["--backend", "scripted", "--kv-shift"], "KV shift is a llama.cpp setting"),
        (["--backend", "mlx", "--kv-shift"], "KV shift is a llama.cpp setting"),
        (["--backend", "llamacpp", "--kv-shift", "--no-prefix-cache"], "needs the prefix cache"),
    ],
)
def test_bad_engine_arguments(with_llamacpp: None, argv: list[str], message: str) -> None:
    with pytest.raises(SetupError, match=message):
        parse("--smoke", *argv)


def test_model_dir_layout_chooses_the_engine_and_a_mismatch_is_refused(
    with_llamacpp: None, tmp_path: Path
) -> None:
    gguf_dir, mlx_dir = gguf_layout(tmp_path / "gguf"), mlx_layout(tmp_path / "mlx")
    assert parse("--smoke", "--model-dir", str(gguf_dir)).engine == "llamacpp"
    assert parse("--smoke", "--model", str(mlx_dir)).engine == "mlx"
    with pytest.raises(SetupError, match=re.escape("holds a model for llama.cpp, not MLX")):
        parse("--smoke", "--backend", "mlx", "--model-dir", str(gguf_dir))
    with pytest.raises(SetupError, match=re.escape("holds a model for MLX, not llama.cpp")):
        parse("--smoke", "--backend", "llamacpp", "--model-dir", str(mlx_dir))


def test_llamacpp_without_the_extra_is_one_line_with_the_install_hint(
    no_llamacpp: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SetupError, match="needs the llamacpp extra"):
        parse("--smoke", "--backend", "llamacpp")
    assert cli.run(["--smoke", "--backend", "llamacpp"]) == cli.EXIT_SETUP
    err = capsys.readouterr().err
    assert err == f"picocontext: error: {INSTALL_HINT}\n"


def test_the_default_falls_back_to_mlx_and_says_so(
    no_llamacpp: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    from picocontext_playground import smoke

    ran: list[ComparisonSettings] = []

    def fake_smoke(settings: ComparisonSettings, report: object, image: object, **_: object) -> int:
        ran.append(settings)
        return 0

    monkeypatch.setattr(smoke, "run_smoke", fake_smoke)
    monkeypatch.chdir(tmp_path)  # the default outputs are checked under out/
    assert cli.run(["--smoke"]) == 0
    assert ran[0].engine == "mlx" and ran[0].model is ModelChoice.QWEN25_05
    err = capsys.readouterr().err
    assert "Using MLX on the CPU" in err and "picocontext[llamacpp]" in err
    assert cli.run(["--smoke", "--backend", "mlx"]) == 0  # asked for: nothing to say
    assert capsys.readouterr().err == ""


def test_help_lists_both_engines() -> None:
    text = cli.build_parser().format_help()
    assert "{mlx,llamacpp,scripted" in text  # (deterministic: an alias of scripted)


# -- loader ------------------------------------------------------------------------------------
def test_the_cache_reloads_when_the_engine_changes() -> None:
    loads: list[str] = []

    def loader(settings: ComparisonSettings, progress: object, cancel: CancelToken) -> LoadedModel:
        loads.append(settings.engine)
        return scripted_model()

    cache = ModelCache(loader)
    for engine in ("mlx", "mlx", "llamacpp"):
        settings = ComparisonSettings(model=ModelChoice.QWEN25_05, engine=engine)
        cache.get(settings, lambda *_: None, CancelToken())
    assert loads == ["mlx", "llamacpp"]
    cache.close()


def test_kv_shift_is_a_llamacpp_setting_named_in_the_caption_and_the_cache_key(
    with_llamacpp: None,
) -> None:
    settings = parse("--smoke", "--backend", "llamacpp", "--kv-shift")
    assert settings.kv_shift and "KV shift: on" in settings.describe()
    assert not parse("--smoke", "--backend", "llamacpp").kv_shift
    loads: list[bool] = []

    def loader(settings: ComparisonSettings, progress: object, cancel: CancelToken) -> LoadedModel:
        loads.append(settings.kv_shift)
        return scripted_model()

    cache = ModelCache(loader)
    for shift in (False, False, True):
        choice = ComparisonSettings(model=ModelChoice.QWEN25_05, engine="llamacpp", kv_shift=shift)
        cache.get(choice, lambda *_: None, CancelToken())
    assert loads == [False, True]  # fixed when llama.cpp loads: a change reloads
    cache.close()


def test_a_directory_for_the_other_engine_is_refused(tmp_path: Path) -> None:
    gguf_dir = gguf_layout(tmp_path / "gguf")
    check_directory_engine(gguf_dir, "llamacpp")
    with pytest.raises(SetupError, match=re.escape("choose the llama.cpp engine")):
        check_directory_engine(gguf_dir, "mlx")
    settings = ComparisonSettings(model=ModelChoice.DIRECTORY, model_dir=gguf_dir, engine="mlx")
    with pytest.raises(SetupError, match=re.escape("holds a model for llama.cpp")):
        load_model(settings)


def test_an_empty_directory_on_llamacpp_says_what_it_needs(tmp_path: Path) -> None:
    settings = ComparisonSettings(
        model=ModelChoice.DIRECTORY, model_dir=tmp_path, engine="llamacpp"
    )
    with pytest.raises(SetupError, match=re.escape("not a llama.cpp model directory")):
        load_model(settings)


def test_an_embedded_model_on_llamacpp_gets_the_gguf_as_shipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No MLX conversion on the llama.cpp path: the loader asks for the GGUF layout, with the
    model's revision and stage progress passed on."""
    from picocontext.models import embedded, llamacpp_backend

    asked: list[str] = []

    def gguf(spec: embedded.EmbeddedSpec, **kwargs: object) -> Path:
        asked.append(f"gguf {spec.name}")
        progress = kwargs["progress"]
        assert callable(progress)
        progress("downloading", 0.5)
        return tmp_path

    def convert(name: str, **kwargs: object) -> Path:
        raise AssertionError("the llama.cpp path must not convert to MLX")

    class Loaded:
        @classmethod
        def load(cls, path: Path, **kwargs: object) -> object:
            asked.append(
                f"load {path.name} {kwargs['model_id']} {kwargs['revision']} {kwargs['kv_shift']}"
            )
            return object()  # not a model: wrap_model refuses it, after the load

    monkeypatch.setattr(embedded, "ensure_embedded_gguf", gguf)
    monkeypatch.setattr(embedded, "ensure_embedded_model", convert)
    monkeypatch.setattr(llamacpp_backend, "LlamaCppModel", Loaded)
    labels: list[str] = []
    settings = ComparisonSettings(model=ModelChoice.QWEN25_05, engine="llamacpp", kv_shift=True)
    with pytest.raises(SetupError, match="is not a token counter"):
        load_model(settings, lambda label, _f: labels.append(label))
    spec = embedded.get_spec("qwen2.5-coder-0.5b")
    assert asked == [
        "gguf qwen2.5-coder-0.5b",
        f"load {tmp_path.name} {spec.title} {spec.revision} True",  # KV shift reaches the engine
    ]
    assert labels == [
        f"Preparing the embedded {spec.title}…",
        "Downloading: 50%",
        f"Loading {spec.title} with llama.cpp…",
    ]


# -- the real llama.cpp path on a tiny GGUF ----------------------------------------------------
@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("xllamacpp")
    pytest.importorskip("transformers")
    from picocontext.models.gguf import install_gguf
    from picocontext.models.tiny import TINY_CHAT_TEMPLATE, write_tiny_gguf

    work = tmp_path_factory.mktemp("tiny-gguf")
    write_tiny_gguf(work / "tiny.gguf", arch="qwen2", context=8192)
    return install_gguf(work / "tiny.gguf", work / "tiny", chat_template=TINY_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def tiny_result(tiny_gguf: Path) -> ComparisonResult:
    settings = ComparisonSettings(
        task=Task.ORDER_LOOKUP,
        policies=("append-only",),
        model=ModelChoice.DIRECTORY,
        model_dir=tiny_gguf,
        engine="llamacpp",
        prefix_cache=False,
    )
    progress: list[str] = []
    model = load_model(settings, lambda label, _f: progress.append(label))
    try:
        assert progress == ["Loading tiny with llama.cpp…"]
        assert model.kind == "llamacpp" and model.model_id == "tiny"
        return run_comparison(settings, model, PrintEvents(lambda _l: None))
    finally:
        model.close()  # one in-process engine at a time


def test_the_real_llamacpp_path_runs_a_comparison(tiny_result: ComparisonResult) -> None:
    """Random weights produce noise, so checks fail — and the run completes and says so."""
    assert tiny_result.completed and tiny_result.engine == "llamacpp"
    run = tiny_result.outcomes[0].steps[0].run
    assert run is not None and run.final_prompt is not None
    assert run.total_input_tokens == run.final_prompt.token_count
    assert 0 < run.total_generated_tokens <= tiny_result.budget.completion_output_tokens
    assert any(d.startswith("engine: ") for d in tiny_result.model_details)  # its version


def test_every_report_names_the_engine_and_the_model(tiny_result: ComparisonResult) -> None:
    text = render_report(tiny_result)
    assert f"Model: {tiny_result.model_label} (tiny)" in text and "Engine: llama.cpp" in text
    doc = json.loads(render_json(tiny_result))
    assert doc["model"]["engine"] == "llamacpp" and doc["model"]["id"] == "tiny"
    assert doc["settings"]["engine"] == "llamacpp"
    page = render_html(tiny_result)
    assert "(tiny) \u00b7 engine: llama.cpp \u00b7" in page


def test_a_cancel_during_the_load_closes_the_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stand-in engine class: one real engine per test process is enough (a second
    xllamacpp server in one process can hang when it is freed)."""
    from picocontext.models import llamacpp_backend

    closed: list[str] = []

    class Loaded:
        def close(self) -> None:
            closed.append("closed")

        @classmethod
        def load(cls, path: Path, **kwargs: object) -> Loaded:
            return cls()

    monkeypatch.setattr(llamacpp_backend, "LlamaCppModel", Loaded)
    cancel = CancelToken()
    directory = gguf_layout(tmp_path / "gguf")
    settings = ComparisonSettings(
        model=ModelChoice.DIRECTORY, model_dir=directory, engine="llamacpp"
    )
    with pytest.raises(Cancelled):
        load_model(settings, lambda label, _f: cancel.cancel(), cancel)
    assert closed == ["closed"]


def test_the_scripted_stand_in_is_named_as_such_in_reports() -> None:
    result = run_comparison(
        ComparisonSettings(task=Task.ORDER_LOOKUP, policies=("append-only",)),
        scripted_model(),
        PrintEvents(lambda _l: None),
    )
    assert "Engine: scripted rules (no model)" in render_report(result)
    assert json.loads(render_json(result))["model"]["engine"] == "scripted"


# -- window ------------------------------------------------------------------------------------
@pytest.fixture
def window(qt_app: QApplication, qtbot: QtBot, with_llamacpp: None) -> Iterator[MainWindow]:
    win = MainWindow(ComparisonSettings(model=ModelChoice.QWEN25_05, engine="llamacpp"))
    qtbot.addWidget(win)
    win.show()
    yield win
    win.shutdown()


def combo_texts(window: MainWindow) -> list[str]:
    return [
        window.controls.engine_combo.itemText(i)
        for i in range(window.controls.engine_combo.count())
    ]


def test_the_picker_shows_engine_and_model(window: MainWindow) -> None:
    assert combo_texts(window) == ["MLX", "llama.cpp"]
    assert window.controls.engine_combo.currentText() == "llama.cpp"
    assert window.controls.current_settings().engine == "llamacpp"
    window.controls.engine_combo.setCurrentIndex(window.controls.engine_combo.findData("mlx"))
    assert window.controls.current_settings().engine == "mlx"
    assert window.controls.current_model() is ModelChoice.QWEN25_05  # it runs on both


def test_an_mlx_only_model_moves_the_engine_and_back(window: MainWindow) -> None:
    window.controls.model_combo.setCurrentIndex(
        window.controls.model_combo.findData(ModelChoice.QWEN3.value)
    )
    assert window.controls.current_engine() == "mlx"
    window.controls.engine_combo.setCurrentIndex(window.controls.engine_combo.findData("llamacpp"))
    assert window.controls.current_model() is ModelChoice.QWEN25_15  # llama.cpp's default


def test_the_kv_shift_box_carries_the_setting_and_greys_out_where_it_cannot_apply(
    window: MainWindow,
) -> None:
    controls = window.controls
    controls.apply_settings(
        ComparisonSettings(model=ModelChoice.QWEN25_05, engine="llamacpp", kv_shift=True)
    )
    assert controls.kv_shift.isChecked() and controls.kv_shift.isEnabled()
    assert controls.current_settings().kv_shift  # what --kv-shift asked for reaches the run
    controls.engine_combo.setCurrentIndex(controls.engine_combo.findData("mlx"))
    assert not controls.kv_shift.isEnabled() and not controls.current_settings().kv_shift
    controls.engine_combo.setCurrentIndex(controls.engine_combo.findData("llamacpp"))
    controls.prefix_cache.setChecked(False)
    assert not controls.kv_shift.isEnabled() and not controls.current_settings().kv_shift


def test_the_engine_picker_is_off_for_the_scripted_model(window: MainWindow) -> None:
    window.controls.apply_settings(ComparisonSettings(model=ModelChoice.SCRIPTED))
    assert not window.controls.engine_combo.isEnabled()


def test_a_chosen_directory_sets_its_engine(window: MainWindow, tmp_path: Path) -> None:
    window.controls.model_combo.setCurrentIndex(
        window.controls.model_combo.findData(ModelChoice.DIRECTORY.value)
    )
    window.controls.model_dir.setText(str(mlx_layout(tmp_path / "mlx")))
    window.controls.model_dir.editingFinished.emit()
    assert window.controls.current_engine() == "mlx"
    window.controls.model_dir.setText(str(gguf_layout(tmp_path / "gguf")))
    window.controls.model_dir.editingFinished.emit()
    assert window.controls.current_settings().engine == "llamacpp"
