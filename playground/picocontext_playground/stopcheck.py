"""How long Stop takes on a real model, measured in the real window (offscreen).

``python -m picocontext_playground.stopcheck --model smollm2-135m --during decode`` starts a
retention comparison, waits until the live line shows the model reading the prompt
(``prefill``) or generating (``decode``), presses Stop and prints how long the run took to
end after that, with the live line at the moment of the press. The number depends on the
machine and its load; the tests bound the same path in model steps on the tiny model.
"""

from __future__ import annotations

import argparse
import os
import time

PHASE_TEXT = {"prefill": "reading the prompt", "decode": "generated"}


def measure(model: str, during: str, wait: float = 0.0) -> tuple[float, str]:
    """Seconds from Stop to the end of the run, and the live line when Stop was pressed
    (``wait`` seconds after the phase first showed, so the press lands inside the work)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from picocontext_playground.qtenv import application, configure
    from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task
    from picocontext_playground.smoke import run_in_window
    from picocontext_playground.window import MainWindow

    app = application()
    configure(app)
    settings = ComparisonSettings(
        task=Task.RETENTION, policies=("append-only",), model=ModelChoice(model)
    )
    window = MainWindow(settings)
    pressed: list[tuple[float, str]] = []
    seen: list[float] = []

    def press_now() -> bool:
        """Polled by the run loop; True (press Stop) once the wanted phase has been on
        screen for ``wait`` seconds."""
        if pressed or PHASE_TEXT[during] not in window.live.text():
            return False
        if not seen:
            seen.append(time.perf_counter())
        if time.perf_counter() - seen[0] < wait:
            return False
        pressed.append((time.perf_counter(), window.live.text()))
        return True

    try:
        run_in_window(window, press_now)
        ended = time.perf_counter()
    finally:
        window.shutdown()
    if not pressed:
        raise SystemExit(f"the run ended before {during!r} was seen: {window.status.text()}")
    return ended - pressed[0][0], pressed[0][1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stopcheck", description=__doc__)
    parser.add_argument("--model", default="smollm2-135m", help="a real model choice")
    parser.add_argument("--during", choices=sorted(PHASE_TEXT), default="decode")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds into the phase")
    args = parser.parse_args(argv)
    seconds, line = measure(args.model, args.during, args.wait)
    print(f"Stop during {args.during} took {seconds:.2f} s (live line: {line})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
