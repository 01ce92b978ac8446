"""Model adapters. Importing this package never imports MLX; real backends load it lazily."""

from picocontext.models.scripted import ByteCounter, ScriptedBackend, scripted_call

__all__ = ["ByteCounter", "ScriptedBackend", "scripted_call"]
