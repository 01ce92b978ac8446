"""The tabs next to the Comparison tab (Manifest, Digest, Conversation), each built by a
factory that imports its module only when the window is built.

A tab that fails to build is replaced by a page that names the error, and the window records
it, so a broken tab never silently disappears and never takes the comparison down with it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QTabWidget, QWidget

TabFactory = Callable[[QWidget], QWidget]


def _manifest_tab(parent: QWidget) -> QWidget:
    from picocontext_playground.manifest_tab import create_tab

    return create_tab(parent)


def _digest_tab(parent: QWidget) -> QWidget:
    from picocontext_playground.digest_tab import DigestTab

    return DigestTab()


def _conversation_tab(parent: QWidget) -> QWidget:
    from picocontext_playground.conversation_tab import create_tab

    return create_tab(parent)


# label -> factory; a tab that fails to build is replaced by a page that says why.
EXTRA_TABS: tuple[tuple[str, TabFactory], ...] = (
    ("Manifest", _manifest_tab),
    ("Digest", _digest_tab),
    ("Conversation", _conversation_tab),
)


def add_extra_tabs(tabs: QTabWidget, parent: QWidget) -> dict[str, str]:
    """Add every extra tab to ``tabs``, in order; returns label -> error of those that failed
    to build (each shown as a page naming its error)."""
    errors: dict[str, str] = {}
    for label, factory in EXTRA_TABS:
        try:
            widget = factory(parent)
        except Exception as exc:  # shown to the user as the tab's content
            errors[label] = f"{type(exc).__name__}: {exc}"
            widget = _error_page(label, errors[label])
        tabs.addTab(widget, label)
    return errors


def _error_page(label: str, error: str) -> QWidget:
    page = QLabel(
        f"The {label} tab could not be built: {error}\n\nThe comparison still works; "
        "please report this error."
    )
    page.setObjectName("tabError")
    page.setWordWrap(True)
    page.setAlignment(Qt.AlignmentFlag.AlignCenter)
    return page


__all__ = ["EXTRA_TABS", "TabFactory", "add_extra_tabs"]
