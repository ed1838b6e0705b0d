"""The generated models are the registry's: this fails while warren/_protocol.py is stale.

docs/protocol.schema.json and docs/openapi.json are checked against the registry by the TypeScript
unit tier (packages/controller/test/api-documents.test.ts); this closes the chain to Python.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import warren
from warren import ERROR_CLASSES, ERROR_CODES, METHODS, WarrenError, make_error

PACKAGE = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((PACKAGE.parent.parent / "docs" / "protocol.schema.json").read_text())


def load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_models", PACKAGE / "scripts" / "gen_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_module_matches_the_schema_documents() -> None:
    generated = load_generator().generate()
    checked_in = (PACKAGE / "warren" / "_protocol.py").read_text()
    assert generated == checked_in, "warren/_protocol.py is stale: run `pnpm py:gen`"


def test_every_method_and_error_code_of_the_registry_is_here() -> None:
    assert sorted(METHODS) == sorted(SCHEMA["methods"])
    assert warren.PROTOCOL_VERSION == SCHEMA["protocolVersion"] and warren.PROTOCOL_MINOR == SCHEMA["protocolMinor"]
    for name, spec in SCHEMA["methods"].items():
        ours = METHODS[name]
        assert (ours.access, ours.payload, ours.idempotent) == (spec["access"], spec.get("payload"), spec["idempotent"])
        assert sorted(ours.events) == sorted(spec.get("events", {}))
    assert {code: (body["status"], body["suggestion"]) for code, body in SCHEMA["errorCodes"].items()} == ERROR_CODES


def test_each_wire_code_has_its_own_class_with_the_registrys_suggestion() -> None:
    for code, (status, suggestion) in ERROR_CODES.items():
        cls = ERROR_CLASSES[code]
        assert cls is not WarrenError and cls.code == code
        err = make_error(code, "m", {"k": 1})
        assert isinstance(err, cls) and (err.status, err.suggestion, err.details) == (status, suggestion, {"k": 1})
    assert set(ERROR_CLASSES) == set(ERROR_CODES) | {"REQUEST_TIMEOUT", "CONNECTION_CLOSED"}
    assert make_error("CONNECTION_CLOSED", "x").is_retryable and not make_error("NOT_FOUND", "x").is_retryable
    assert make_error("NOT_FOUND", "gone").to_json()["name"] == "NotFoundError"


def test_params_are_strict_and_results_tolerant() -> None:
    read = METHODS["fs.read"]
    assert read.params.parse_obj({"path": "a", "range": {"unit": "lines", "startLine": 2}})
    for bad in ({"path": "a", "extra": 1}, {"path": 5}, {"path": "a", "range": {"unit": "pages"}}):
        try:
            read.params.parse_obj(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
    result = read.result.parse_obj({"path": "a", "size": 1, "mtimeMs": 1.5, "unit": "file", "bytesRead": 1, "truncated": False, "new": {}})
    assert result.bytes_read == 1
