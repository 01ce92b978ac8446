"""picocontext_playground — the PySide6 comparison app and its headless smoke mode."""
