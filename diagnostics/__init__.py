"""picocontext_diagnostics — fixtures, graders, runners and benchmarks over the public core API."""
