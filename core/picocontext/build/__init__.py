"""picocontext.build -- the pcx compiler (``pcx build``).

Adapters turn a source (tool schemas, a docs tree, skills, memory files, any folder) into a
:class:`~picocontext.build.ir.SourceTree`; a descriptor engine (offline TF-IDF or an LLM over a
:class:`~picocontext.backend.ChatModel`) writes the ``what``/``when`` lines bottom-up with
contrast and repair; shaping fits the tree to each budget and proves every leaf reachable;
emit writes one validated manifest per budget, a leaf store and ``llms.txt``.
"""

from picocontext.build.adapters import load_source
from picocontext.build.adapters.files import load_files
from picocontext.build.compiler import BuildOptions, BuildResult, compile_source, compile_tree
from picocontext.build.engines.offline import OfflineEngine
from picocontext.build.errors import (
    BuildError,
    ConfigError,
    EngineError,
    GateFailed,
    SelfCheckFailed,
    SourceError,
)
from picocontext.build.ir import SourceNode, SourceTree, path_id, slug

__all__ = [
    "BuildError",
    "BuildOptions",
    "BuildResult",
    "ConfigError",
    "EngineError",
    "GateFailed",
    "OfflineEngine",
    "SelfCheckFailed",
    "SourceError",
    "SourceNode",
    "SourceTree",
    "compile_source",
    "compile_tree",
    "load_files",
    "load_source",
    "path_id",
    "slug",
]
