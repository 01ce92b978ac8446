"""Each package's ``__all__`` is its public API: it names exactly what the facade offers.

Every public name a facade module holds (what ``from facade import *`` and readers see) is in
``__all__``, and every name in ``__all__`` resolves. Submodules are not API by being imported.
"""

from __future__ import annotations

import importlib
import types

import pytest

FACADES = (
    "picocontext",
    "picocontext.build",
    "picocontext.cli",
    "picocontext.distill",
    "picocontext.manifest",
    "picocontext.models",
    "picocontext.policies",
    "picocontext_diagnostics",
    "picocontext_playground",
)


def _public_members(module: types.ModuleType) -> set[str]:
    """A package facade's public names; for a plain module, the public names it defines (not
    what it imports for its own use)."""
    package = hasattr(module, "__path__")
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name != "annotations"
        and not isinstance(value, types.ModuleType)
        and (package or getattr(value, "__module__", module.__name__) == module.__name__)
    }


@pytest.mark.parametrize("name", FACADES)
def test_all_is_exactly_the_public_members(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    lazy = set(getattr(module, "_LAZY", {}))  # resolved on first use by __getattr__
    assert sorted(_public_members(module) - set(exported)) == [], f"{name}: missing in __all__"
    unresolved = [n for n in exported if n not in vars(module) and n not in lazy]
    assert unresolved == [], f"{name}.__all__ names what it does not define"
