"""Descriptor engines: who writes the ``what``/``when`` lines."""

from picocontext.build.engines.base import DescriptorEngine, Grade
from picocontext.build.engines.llm import LLMEngine
from picocontext.build.engines.offline import OfflineEngine

__all__ = ["DescriptorEngine", "Grade", "LLMEngine", "OfflineEngine"]
