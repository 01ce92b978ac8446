"""``picocontext app`` (and ``picocontext`` with no command): the window, or a headless smoke.

    picocontext                                   open the playground window
    picocontext --smoke                           order lookup, headless
    picocontext --episode-smoke retention         exact retention, headless
    picocontext --episode-smoke state-updates --pressure --report out/r.txt --image out/r.png
    picocontext --episode-smoke retention --backend scripted --report out/r.html
    picocontext --episode-smoke retention --backend llamacpp --model qwen2.5-coder-0.5b

--backend chooses the engine (mlx or llamacpp; default: llama.cpp off Apple silicon when its
extra is installed, else MLX, which is said on stderr) or the scripted stand-in; --model
defaults to that engine's default model, and a --model-dir's layout (model.gguf or
config.json) chooses the engine unless --backend names one.

Smoke runs write ``out/smoke-<task>.txt`` and ``.png`` unless --report/--image (or
$PICOCONTEXT_SMOKE_REPORT / $PICOCONTEXT_SMOKE_IMAGE) say otherwise. The report's extension
chooses its format: ``.txt`` text, ``.json`` the whole run for scripts, ``.html`` one
self-contained page. Both paths are checked before the run starts.

Exit codes (the rule of every command, ``picocontext.cli``): 0 the run completed and every
policy passed its checks, 3 the run completed but a policy failed a check (the report and the
verdict say which and why; the main job is built so that append-only fails), 1 the run was
stopped (Ctrl-C), 2 setup error (bad arguments, no model, unwritable output, no display).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext.cli import ProgressEcho, add_switch, error_line, run_command, standalone_parser
from picocontext_playground.errors import SetupError
from picocontext_playground.settings import (
    DEFAULT_POLICIES,
    ENGINES,
    ComparisonSettings,
    Engine,
    ModelChoice,
    Task,
    engine_for,
)

REPORT_ENV = "PICOCONTEXT_SMOKE_REPORT"
IMAGE_ENV = "PICOCONTEXT_SMOKE_IMAGE"
MODEL_DIR_ENV = "PICOCONTEXT_MODEL_DIR"
EXIT_SETUP = 2
PROG = "picocontext"

MODEL_NAMES = tuple(c.value for c in ModelChoice if c is not ModelChoice.DIRECTORY)
_EPISODES = {
    "retention": Task.RETENTION,
    "state-updates": Task.STATE_UPDATES,
    "revisions": Task.REVISIONS,
}


def register(subparsers: Any) -> argparse.ArgumentParser:
    """``picocontext app``, also what ``picocontext`` runs when no command is named."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "app",
        help="the playground window, or a headless comparison (--smoke, --episode-smoke)",
        description=(
            "PicoContext playground: run context policies side by side on one local model. "
            "Without --smoke/--episode-smoke it opens the window."
        ),
        allow_abbrev=False,
    )
    add_arguments(parser)
    parser.set_defaults(func=_run_args)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The app's options as a parser of its own, named ``picocontext``."""
    return standalone_parser(register, PROG)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--smoke", action="store_true", help="headless order-lookup comparison, then exit"
    )
    mode.add_argument(
        "--episode-smoke",
        metavar="TASK",
        help="headless sequential comparison: retention or state-updates (stateUpdates too)",
    )
    parser.add_argument(
        "--pressure", action="store_true", help="48 noise lines per update (episode smoke)"
    )
    parser.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help="comma-separated policy columns in run order (default: append-only,editable)",
    )
    parser.add_argument(
        "--model",
        metavar="NAME_OR_DIR",
        help=f"a model name ({', '.join(MODEL_NAMES)}) or a local model directory "
        "(default: the engine's default model: Qwen2.5-Coder-1.5B on llama.cpp, Qwen3 on "
        "Apple silicon, the embedded Qwen2.5-Coder-0.5B on MLX on a CPU)",
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        help=f"a local model directory (also ${MODEL_DIR_ENV}); never downloads: MLX "
        "(config.json and weights) or llama.cpp (model.gguf beside the tokenizer files)",
    )
    parser.add_argument(
        "--backend",
        choices=(*ENGINES, "scripted", "deterministic"),
        help="the engine: mlx or llamacpp (default: llamacpp off Apple silicon when its extra "
        "is installed, else mlx); scripted = deterministic rules and byte counts, no model "
        "(same as --model scripted; deterministic, eval's older name for it, is an alias)",
    )
    parser.add_argument(
        "--decoding",
        choices=DECODINGS,
        help="constrained: grammar-enforced decisions, tool calls and JSON answers (default "
        "for embedded models); free: the model writes them unaided",
    )
    add_switch(parser, "--constrained", "deprecated spelling of --decoding constrained|free")
    add_switch(
        parser, "--prefix-cache", "reuse the KV cache of the common prompt prefix (default on)"
    )
    parser.add_argument(
        "--no-prefix-cache", action="store_true", help="the same as --prefix-cache off"
    )
    parser.add_argument(
        "--kv-shift",
        action="store_true",
        help="llama.cpp: after an edit, move the cached records behind the deleted ones "
        "instead of computing them again (approximate; off by default)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="headless: reuse the policies an interrupted run of the same settings finished "
        "(every run journals them in the data folder) and run only the rest",
    )
    parser.add_argument(
        "--report",
        type=Path,
        help=f"report path; .txt, .json or .html chooses the format (${REPORT_ENV}; "
        "default out/smoke-<task>.txt)",
    )
    parser.add_argument(
        "--image",
        type=Path,
        help=f"window PNG path (${IMAGE_ENV}; default out/smoke-<task>.png)",
    )


DECODINGS = ("free", "constrained")


def _constrained(args: argparse.Namespace, choice: ModelChoice) -> bool:
    """``--decoding`` (or the deprecated ``--constrained``); by default constrained exactly
    for the embedded models."""
    given = args.decoding is not None and args.constrained is not None
    if given and (args.decoding == "constrained") != bool(args.constrained):
        raise SetupError(f"--constrained contradicts --decoding {args.decoding}")
    if args.decoding is not None:
        return bool(args.decoding == "constrained")
    if args.constrained is not None:
        return bool(args.constrained)
    from picocontext.models import MODELS

    spec = MODELS.get(choice.value)
    return spec is not None and spec.source == "embedded"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value) if value else None


def _model_arguments(args: argparse.Namespace) -> tuple[str | None, Path | None]:
    """(model name, model directory) from ``--model NAME_OR_DIR`` / ``--model-dir DIR``."""
    if args.backend == "scripted" and (args.model not in (None, "scripted") or args.model_dir):
        raise SetupError("--backend scripted uses no model; drop --model/--model-dir")
    if args.model is not None and args.model_dir is not None:
        raise SetupError("give either --model or --model-dir, not both")
    if args.model is None or args.model in MODEL_NAMES:
        return args.model, args.model_dir
    if not Path(args.model).expanduser().is_dir():
        raise SetupError(
            f"--model {args.model!r} is neither a known model ({', '.join(MODEL_NAMES)}) "
            "nor a model directory"
        )
    return None, Path(args.model)


def settings_from_args(args: argparse.Namespace) -> ComparisonSettings:
    """Validate the arguments into :class:`ComparisonSettings` (errors name the flag)."""
    if args.backend == "deterministic":
        args.backend = "scripted"  # one name for the rule-based stand-in in every command
    if args.smoke:
        task = Task.ORDER_LOOKUP
    elif args.episode_smoke is not None:
        task = Task.parse(args.episode_smoke)
        if task not in _EPISODES.values():
            raise SetupError(
                f"--episode-smoke takes one of {', '.join(_EPISODES)}, not {args.episode_smoke!r}"
            )
    else:
        task = Task.RETENTION
    if args.pressure and not task.sequential:
        raise SetupError("--pressure applies to --episode-smoke only")
    name, explicit_dir = _model_arguments(args)
    model_dir: Path | None = explicit_dir or _env_path(MODEL_DIR_ENV)
    if args.no_prefix_cache and args.prefix_cache:
        raise SetupError("--no-prefix-cache contradicts --prefix-cache on")
    if args.backend == "scripted" or name == ModelChoice.SCRIPTED.value:
        choice, model_dir = ModelChoice.SCRIPTED, None
    elif name is not None:
        choice, model_dir = ModelChoice(name), None
    elif model_dir is not None:
        choice = ModelChoice.DIRECTORY
    else:
        from picocontext_playground.settings import default_model

        choice = default_model(_named_engine(args))
    if model_dir is not None:
        model_dir = model_dir.expanduser()
        if model_dir.exists() and not model_dir.is_dir():
            raise SetupError(f"model directory {model_dir} is a file, not a directory")
        if not model_dir.is_dir():
            raise SetupError(f"model directory {model_dir} does not exist")
    policies = tuple(p.strip() for p in str(args.policies).split(",") if p.strip())
    if not policies:
        raise SetupError("--policies names no policy — give one or more, e.g. editable,navigated")
    try:
        settings = ComparisonSettings(
            task=task,
            pressure=args.pressure,
            policies=policies,
            model=choice,
            model_dir=model_dir,
            engine=_named_engine(args) or engine_for(choice, model_dir),
            constrained=_constrained(args, choice),
            prefix_cache=not args.no_prefix_cache and args.prefix_cache is not False,
            kv_shift=args.kv_shift,
        )
    except ValueError as exc:
        raise SetupError(_first_error(exc)) from None
    _check_engine(settings)
    return settings


def _named_engine(args: argparse.Namespace) -> Engine | None:
    """The engine ``--backend`` names (``None``: the model's or the default engine)."""
    if args.backend == "mlx":
        return "mlx"
    if args.backend == "llamacpp":
        return "llamacpp"
    return None


def _check_engine(settings: ComparisonSettings) -> None:
    """Refuse, before a window opens, an engine whose extra is missing or a directory built
    for the other engine."""
    if not settings.model.real:
        return
    if settings.engine == "llamacpp":
        from picocontext.models import LLAMACPP_INSTALL_HINT, llamacpp_available

        if not llamacpp_available():
            raise SetupError(LLAMACPP_INSTALL_HINT)
    if settings.model_dir is not None:
        from picocontext_playground.model_loader import check_directory_engine

        check_directory_engine(settings.model_dir, settings.engine)


def engine_notes(args: argparse.Namespace, settings: ComparisonSettings) -> tuple[str, ...]:
    """Why the default engine is a fallback (llama.cpp's extra is missing), when it is."""
    if args.backend is not None or not settings.model.real:
        return ()
    from picocontext.models import default_engine
    from picocontext.models import engine_notes as registry_notes

    engine = default_engine()
    return registry_notes(engine) if settings.engine == engine else ()


def default_output(settings: ComparisonSettings, suffix: str) -> Path:
    """Where a smoke run writes when no path is given: ``out/smoke-<task>[-pressure].<ext>``
    under the current directory (``scripts/run-example.sh`` runs from the repository root,
    where ``out/`` is ignored by git)."""
    name = f"smoke-{settings.task.value}" + ("-pressure" if settings.pressure else "")
    return Path("out") / f"{name}.{suffix}"


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        items = errors()
        if items:
            return str(items[0].get("msg", exc)).removeprefix("Value error, ")
    return str(exc)


def run(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run; returns the process exit code."""
    return run_command("app", argv, prog=PROG, registrar=register)


def _run_args(args: argparse.Namespace) -> int:
    """Run parsed options; a setup problem is one line on stderr and exit code 2."""
    try:
        settings = settings_from_args(args)
        for note in engine_notes(args, settings):
            print(f"{PROG}: note: {note}", file=sys.stderr)
        headless = bool(args.smoke or args.episode_smoke is not None)
        report = args.report or _env_path(REPORT_ENV)
        image = args.image or _env_path(IMAGE_ENV)
        if headless:
            report = report or default_output(settings, "txt")
            image = image or default_output(settings, "png")
        if not headless and (args.report or args.image):
            raise SetupError("--report and --image apply to --smoke and --episode-smoke")
        if not headless and args.resume:
            raise SetupError(
                "--resume applies to --smoke and --episode-smoke — in the window, press Resume"
            )
        if headless:
            check_outputs(report, image)
        from picocontext_playground.qtenv import choose_platform

        platform_name = choose_platform(headless)
        if not headless and platform_name == "offscreen":
            raise SetupError(
                "no display found, so the window cannot open; run a headless comparison "
                "with --smoke or --episode-smoke retention"
            )
        if headless:
            from picocontext_playground.smoke import run_smoke

            echo = ProgressEcho()
            try:
                return run_smoke(settings, report, image, echo=echo, resume=args.resume)
            finally:
                echo.close()
        return _window(settings)
    except SetupError as exc:
        print(error_line(getattr(args, "command_prog", PROG), exc.message), file=sys.stderr)
        return EXIT_SETUP


def check_outputs(report: Path | None, image: Path | None) -> None:
    """Refuse an unknown report format or an unwritable report/image path up front."""
    from picocontext_playground.reports import check_report_path, check_writable

    if report is not None:
        check_report_path(report, "--report")
    if image is not None:
        if image.suffix.lower() != ".png":
            raise SetupError(f"--image {image}: the window is saved as PNG — name the file .png")
        check_writable(image, "--image")


def _window(settings: ComparisonSettings) -> int:
    from picocontext_playground.qtenv import application, require_glyphs
    from picocontext_playground.window import MainWindow

    app = application()
    require_glyphs(app)
    window = MainWindow(settings)
    window.show()
    return int(app.exec())
