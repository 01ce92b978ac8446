"""Generate the pcx 0.2 JSON Schema from the models, so the schema we ship cannot drift from
what the code accepts (a test compares the shipped file with :func:`generate_schema`)."""

from __future__ import annotations

import importlib
import json
from typing import Any

from picocontext.manifest.model import Manifest

SCHEMA_ID = "urn:picocontext:schema:pcx-0.2"
SCHEMA_FILENAME = "pcx-0.2.schema.json"


def _simplify(obj: Any) -> Any:
    """Drop pydantic's ``anyOf [X, null]`` wrappers (absent is how JSON says "none"; null is
    not part of the format), generated titles and ``default: null``."""
    if isinstance(obj, list):
        return [_simplify(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    any_of = obj.get("anyOf")
    if isinstance(any_of, list):
        rest = [x for x in any_of if x != {"type": "null"}]
        if len(rest) == 1 and len(rest) < len(any_of):
            merged = {k: v for k, v in obj.items() if k not in ("anyOf", "default")}
            merged.update(rest[0])
            return _simplify(merged)
    for key, value in obj.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and value is None:
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _simplify(v) for name, v in value.items()}
            continue
        out[key] = _simplify(value)
    return out


def generate_schema() -> dict[str, Any]:
    raw = Manifest.model_json_schema(mode="validation")
    schema = _simplify(raw)
    schema["$defs"]["Node"]["oneOf"] = [
        {"required": ["children"], "not": {"required": ["payload"]}},
        {"required": ["payload"], "not": {"required": ["children"]}},
    ]
    head = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "picocontext pcx 0.2 manifest",
        "description": (
            "Generated from picocontext.manifest.model; structure (unique ids, single parent, "
            "no cycles or orphans, resolving links) is checked by `pcx validate`."
        ),
    }
    return {**head, **{k: v for k, v in schema.items() if k not in head}}


def schema_text() -> str:
    return json.dumps(generate_schema(), indent=2, sort_keys=False) + "\n"


def schema_errors(document: Any) -> list[str]:
    """Validate raw JSON against the generated schema with ``jsonschema`` (optional extra)."""
    try:
        jsonschema: Any = importlib.import_module("jsonschema")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "`--schema` needs the jsonschema package: pip install jsonschema"
        ) from exc
    validator = jsonschema.Draft202012Validator(generate_schema())
    out = []
    for err in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        loc = "/".join(str(p) for p in err.absolute_path) or "<document>"
        msg = err.message if len(err.message) <= 300 else err.message[:300] + "..."
        out.append(f"{loc}: {msg}")
    return out
