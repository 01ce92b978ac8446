"""picocontext_playground — the PySide6 comparison app and its headless smoke mode."""

# An application, not a library: its public surface is the `picocontext app` command
# (picocontext_playground.cli.register, found through the picocontext.commands entry points).
__all__: list[str] = []
