"""Qt start-up: pick a platform that works here, create the application, choose fonts.

Why: the smoke modes must run on machines with no display (CI, SSH) and still render real
text. Qt needs ``QT_QPA_PLATFORM=offscreen`` there, and the fonts must be real outline fonts
(DejaVu on Linux) or every glyph becomes a box; :func:`glyphs_render` checks exactly that.
"""

from __future__ import annotations

import os
import sys

from PySide6.QtGui import QFont, QFontDatabase, QFontMetrics
from PySide6.QtWidgets import QApplication

from picocontext_playground.errors import SetupError

APP_NAME = "PicoContext Playground"
BASE_POINT_SIZE = 10
_SANS = ("DejaVu Sans", "Noto Sans", "Liberation Sans", "Helvetica Neue", "Segoe UI", "Arial")
_MONO = ("DejaVu Sans Mono", "Noto Sans Mono", "Liberation Mono", "Menlo", "Consolas")


def has_display() -> bool:
    """Whether a window can be shown: always on macOS/Windows, on Linux only with X/Wayland."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def choose_platform(headless: bool) -> str | None:
    """Set ``QT_QPA_PLATFORM=offscreen`` for headless runs or when there is no display; an
    explicit setting by the user always wins. Returns the platform in force (or ``None``)."""
    explicit = os.environ.get("QT_QPA_PLATFORM")
    if explicit:
        return explicit
    if headless or not has_display():
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        return "offscreen"
    return None


def _first_family(candidates: tuple[str, ...]) -> str | None:
    families = set(QFontDatabase.families())
    return next((name for name in candidates if name in families), None)


def monospace_font(point_size: int = BASE_POINT_SIZE - 1) -> QFont:
    family = _first_family(_MONO)
    if family is not None:
        font = QFont(family)
    else:
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    font.setPointSize(point_size)
    return font


def glyphs_render(font: QFont) -> bool:
    """Real glyphs have different advances for narrow and wide letters; the box that a missing
    font draws has the same width for every character."""
    metrics = QFontMetrics(font)
    return metrics.horizontalAdvance("iiii") < metrics.horizontalAdvance("WWWW")


def application(argv: list[str] | None = None) -> QApplication:
    """The one QApplication, created on first use with readable fonts."""
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        return existing
    app = QApplication(argv or [sys.argv[0] if sys.argv else "picocontext"])
    configure(app)
    return app


def configure(app: QApplication) -> None:
    """Name the application and give it a readable sans-serif font (10 pt)."""
    app.setApplicationName(APP_NAME)
    app.setOrganizationName("picocontext")
    family = _first_family(_SANS)
    font = QFont(family) if family else app.font()
    font.setPointSize(BASE_POINT_SIZE)
    app.setFont(font)


def require_glyphs(app: QApplication) -> None:
    """Fail with the fix when text would render as boxes."""
    if not glyphs_render(app.font()):
        raise SetupError(
            "Qt found no usable font, so text would render as boxes. Install a font package "
            "(on Debian/Ubuntu: apt-get install fonts-dejavu-core) and run again."
        )
