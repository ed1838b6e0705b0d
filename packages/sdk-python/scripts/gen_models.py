#!/usr/bin/env python3
"""Generates warren/_protocol.py and warren/tools/_definitions.py (pydantic models, v2 or v1 through
warren/_pydantic.py) from JSON Schema documents.

The protocol registry (packages/protocol) is the one source of truth: `pnpm openapi` exports it as
docs/protocol.schema.json (every WebSocket method's params, result and events, the frame header and
the error codes) and docs/openapi.json (the controller's REST bodies). This script turns those two
documents into Python classes, so the Python SDK checks exactly what the TypeScript one does.

    python3 packages/sdk-python/scripts/gen_models.py          # writes the module
    python3 packages/sdk-python/scripts/gen_models.py --check  # exits 1 when the module is stale

Params and request bodies are strict (unknown fields refused, no type coercion); results, events
and answers are tolerant (unknown fields dropped), as the registry's `tolerant` reads them.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
REPO = PACKAGE.parent.parent
PROTOCOL_SCHEMA = REPO / "docs" / "protocol.schema.json"
OPENAPI = REPO / "docs" / "openapi.json"
TOOLSETS = REPO / "docs" / "toolsets.json"
TARGET = PACKAGE / "warren" / "_protocol.py"
TOOLS_TARGET = PACKAGE / "warren" / "tools" / "_definitions.py"
# The Python program Toolsmith runs inside the sandbox: one String.raw template in the TypeScript SDK.
TOOLSMITH_HELPER = REPO / "packages" / "sdk" / "src" / "tools" / "toolsmith-helper.py"

# Names a pydantic model (v1 or v2) already uses for its own methods: a field of that name gets a trailing `_`.
RESERVED = {"copy", "dict", "json", "schema", "schema_json", "fields", "construct", "validate", "parse_obj", "parse_raw", "parse_file", "Config"}
# Request bodies of the REST API: checked strictly like params; every other component is an answer.
REST_INPUTS = {"CreateSandboxRequest", "DeriveTokenRequest", "SetTimeoutRequest", "PullImageRequest"}


def pascal(text: str) -> str:
    parts = re.split(r"[^A-Za-z0-9]+", text)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def snake(name: str) -> str:
    out = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    out = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", out).lower()
    out = re.sub(r"[^a-z0-9_]", "_", out)
    if out[:1].isdigit():
        out = f"f_{out}"
    if keyword.iskeyword(out) or out in RESERVED:
        out += "_"
    return out


class Generator:
    def __init__(self) -> None:
        self.classes: list[str] = []
        self.names: set[str] = set()
        # One class per distinct schema: the same shape (a process's state, a line range) is one type.
        self.shapes: dict[str, str] = {}
        # Constrained types (constr(...), conint(...)) under names of their own: pydantic checks the
        # constraint, type checkers see the plain type (a call is not a valid annotation for them).
        self.aliases: dict[str, tuple[str, str]] = {}
        self.inline: dict[str, str] = {}

    def alias(self, expression: str, plain: str, inline: bool = False) -> str:
        """A name for a constrained type; ``inline`` ones (lists of a model) are defined where first used, after their item."""
        if expression not in self.aliases and expression not in self.inline:
            name = f"_C{len(self.aliases) + len(self.inline) + 1}"
            if inline:
                self.inline[expression] = name
                self.classes.append(f"if TYPE_CHECKING:\n    {name} = {plain}\nelse:\n    {name} = {expression}")
            else:
                self.aliases[expression] = (name, plain)
        return self.inline[expression] if expression in self.inline else self.aliases[expression][0]

    def alias_block(self) -> str:
        if not self.aliases:
            return ""
        checked = "\n".join(f"    {name} = {plain}" for name, plain in self.aliases.values())
        runtime = "\n".join(f"    {name} = {expression}" for expression, (name, _) in self.aliases.items())
        return f"if TYPE_CHECKING:\n{checked}\nelse:\n{runtime}\n"

    def unique(self, name: str) -> str:
        candidate, n = name, 2
        while candidate in self.names:
            candidate, n = f"{name}{n}", n + 1
        self.names.add(candidate)
        return candidate

    def type_of(self, schema: dict[str, Any], name: str, strict: bool) -> str:
        """The Python annotation of one subschema; objects with properties become classes named after `name`."""
        if "$ref" in schema:
            return schema["$ref"].rsplit("/", 1)[-1]
        if "const" in schema:
            return f"Literal[{schema['const']!r}]"
        if "enum" in schema:
            return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]"
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [self.type_of(option, self.variant_name(name, option, i), strict) for i, option in enumerate(schema[key])]
                return self.union(options)
        kind = schema.get("type")
        if isinstance(kind, list):
            options = [self.type_of({**schema, "type": k}, name, strict) for k in kind]
            return self.union(options)
        if kind == "null":
            return "None"
        if kind == "boolean":
            return "StrictBool"
        if kind == "string":
            return self.string(schema)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            bounds = self.bounds(schema)
            if not bounds:
                return "Union[StrictInt, StrictFloat]"
            return f"Union[{self.alias(f'conint(strict=True{bounds})', 'int')}, {self.alias(f'confloat(strict=True{bounds})', 'float')}]"
        if kind == "array":
            item = self.type_of(schema.get("items", {}), f"{name}Item", strict)
            limits = "".join(f", {py}={schema[js]}" for js, py in (("minItems", "min_items"), ("maxItems", "max_items")) if js in schema)
            return self.alias(f"conlist({item}{limits})", f"List[{item}]", inline=True) if limits else f"List[{item}]"
        if kind == "object":
            if schema.get("properties"):
                return self.model(schema, name, strict)
            extra = schema.get("additionalProperties", {})
            key = self.string(schema.get("propertyNames", {})) if "propertyNames" in schema else "StrictStr"
            value = "Any" if extra in ({}, True) else self.type_of(extra, f"{name}Value", strict)
            return f"Dict[{key}, {value}]"
        return "Any"

    def variant_name(self, name: str, option: dict[str, Any], index: int) -> str:
        for prop in option.get("properties", {}).values():
            if isinstance(prop, dict) and isinstance(prop.get("const"), str):
                return f"{name}{pascal(prop['const'])}"
        return f"{name}Variant{index + 1}"

    @staticmethod
    def union(options: list[str]) -> str:
        unique = list(dict.fromkeys(options))
        if "None" in unique:
            rest = [o for o in unique if o != "None"]
            return f"Optional[{rest[0] if len(rest) == 1 else 'Union[' + ', '.join(rest) + ']'}]"
        return unique[0] if len(unique) == 1 else f"Union[{', '.join(unique)}]"

    @staticmethod
    def bounds(schema: dict[str, Any]) -> str:
        pairs = (("minimum", "ge"), ("maximum", "le"), ("exclusiveMinimum", "gt"), ("exclusiveMaximum", "lt"))
        return "".join(f", {py}={schema[js]!r}" for js, py in pairs if js in schema)

    def integer(self, schema: dict[str, Any]) -> str:
        return self.alias(f"conint(strict=True{self.bounds(schema)})", "int")

    def string(self, schema: dict[str, Any]) -> str:
        args = []
        if "minLength" in schema:
            args.append(f"min_length={schema['minLength']}")
        if "maxLength" in schema:
            args.append(f"max_length={schema['maxLength']}")
        if "pattern" in schema:
            args.append(f"regex={schema['pattern']!r}")
        return self.alias(f"constr(strict=True, {', '.join(args)})", "str") if args else "StrictStr"

    def model(self, schema: dict[str, Any], name: str, strict: bool, exact_name: bool = False) -> str:
        shape = json.dumps([schema, strict], sort_keys=True)
        if shape in self.shapes:
            if not exact_name:
                return self.shapes[shape]
            self.names.add(name)
            self.classes.append(f"{name} = {self.shapes[shape]}")
            return name
        name = name if exact_name else self.unique(name)
        if exact_name:
            self.names.add(name)
        base = "_Strict" if strict and schema.get("additionalProperties") is False else "_Tolerant" if not strict else "_Open"
        required = set(schema.get("required", []))
        lines = [f"class {name}({base}):"]
        doc = schema.get("description")
        if doc:
            lines.append(f"    {json.dumps(doc)}")
        for prop, sub in schema["properties"].items():
            annotation = self.type_of(sub, f"{name}{pascal(prop)}", strict)
            field = snake(prop)
            alias = "" if field == prop else f", alias={prop!r}"
            if prop in required:
                lines.append(f"    {field}: {annotation} = Field(...{alias})")
            elif "default" in sub:
                lines.append(f"    {field}: {annotation} = Field({sub['default']!r}{alias})")
            else:
                optional = annotation if annotation.startswith("Optional[") or annotation == "Any" else f"Optional[{annotation}]"
                lines.append(f"    {field}: {optional} = Field(None{alias})")
        if len(lines) == 1:
            lines.append("    pass")
        self.classes.append("\n".join(lines))
        self.shapes[shape] = name
        return name

    def top(self, schema: dict[str, Any], name: str, strict: bool) -> str:
        """A top-level schema as a class of exactly `name` (objects) or a type alias (anything else)."""
        if schema.get("type") == "object" and "properties" in schema:
            return self.model(schema, name, strict, exact_name=True)
        if schema.get("type") == "object" and not schema.get("properties") and "additionalProperties" not in schema:
            return self.model({**schema, "properties": {}}, name, strict, exact_name=True)
        annotation = self.type_of(schema, name, strict)
        self.names.add(name)
        self.classes.append(f"{name} = {annotation}")
        return name


HEADER = '''# Generated by packages/sdk-python/scripts/gen_models.py from docs/protocol.schema.json and
# docs/openapi.json (themselves exported from the protocol registry by `pnpm openapi`).
# Do not edit: run `pnpm py:gen`. tests/test_generated.py fails while this file is stale.
# fmt: off
"""The wire's models: every method's params, result and events, the REST bodies and the error codes."""

from typing import TYPE_CHECKING, Any, Dict, List, Literal, Mapping, NamedTuple, Optional, Type, Union

from ._pydantic import BaseModel, Field, OpenModel, StrictBool, StrictFloat, StrictInt, StrictModel, StrictStr, TolerantModel, confloat, conint, conlist, constr


class _Strict(StrictModel):
    """What a receiver checks strictly: unknown fields refused, no coercion."""


class _Open(OpenModel):
    """An input object the schema leaves open: unknown fields are kept."""


class _Tolerant(TolerantModel):
    """An answer: fields a newer server adds are dropped, so it may grow within a major version."""


class MethodSpec(NamedTuple):
    """One method's contract, as the registry states it."""

    params: Type[BaseModel]
    result: Type[BaseModel]
    access: str
    payload: Optional[str]
    idempotent: bool
    events: Mapping[str, Type[BaseModel]]
'''


def generate() -> str:
    protocol = json.loads(PROTOCOL_SCHEMA.read_text())
    openapi = json.loads(OPENAPI.read_text())
    gen = Generator()
    specs: list[str] = []
    for method, spec in protocol["methods"].items():
        base = pascal(method)
        params = gen.top(spec["params"], f"{base}Params", strict=True)
        result = gen.top(spec["result"], f"{base}Result", strict=False)
        events = {event: gen.top(data, f"{base}{pascal(event)}Event", strict=False) for event, data in spec.get("events", {}).items()}
        events_text = "{" + ", ".join(f"{e!r}: {c}" for e, c in events.items()) + "}"
        specs.append(
            f"    {method!r}: MethodSpec({params}, {result}, {spec['access']!r}, {spec.get('payload')!r}, {spec['idempotent']!r}, {events_text}),"
        )
    frame = gen.top(protocol["frameHeader"], "FrameHeader", strict=False)
    common = {event: gen.top(data, f"{pascal(event)}Event", strict=False) for event, data in protocol["commonEvents"].items()}
    # The REST components, in an order where a $ref is defined before it is used.
    components: dict[str, Any] = openapi["components"]["schemas"]
    ordered = sorted(components, key=lambda n: (json.dumps(components[n]).count("$ref"), n))
    for name in ordered:
        # A REST body that is also a method's result (`AuditListResult`) keeps the method's class.
        if name not in gen.names:
            gen.top(components[name], name, strict=name in REST_INPUTS)
    codes = "\n".join(f"    {code!r}: ({body['status']}, {body['suggestion']!r})," for code, body in protocol["errorCodes"].items())
    parts = [
        HEADER,
        f"PROTOCOL_VERSION = {protocol['protocolVersion']}",
        f"PROTOCOL_MINOR = {protocol['protocolMinor']}",
        "#: The largest frame (header + payload) a peer accepts; bigger ones get FRAME_TOO_LARGE.",
        f"MAX_FRAME_BYTES = {protocol['limits']['maxFrameBytes']}",
        "#: The largest JSON header a frame may carry.",
        f"MAX_HEADER_BYTES = {protocol['limits']['maxHeaderBytes']}",
        "#: The WebSocket message cap: past it the socket closes with 1009.",
        f"WS_MAX_PAYLOAD_BYTES = {protocol['limits']['wsMaxPayloadBytes']}",
        "",
        "#: Every wire error code: its HTTP status and what to do next.",
        "ERROR_CODES: Dict[str, tuple] = {",
        codes,
        "}",
        "",
        "",
        gen.alias_block(),
        "",
        "\n\n\n".join(gen.classes),
        "",
        "",
        "#: The method registry: name to params, result, access, payload side, idempotence and events.",
        "METHODS: Dict[str, MethodSpec] = {",
        *specs,
        "}",
        "",
        "#: Events any request may carry, whatever its method.",
        "COMMON_EVENTS: Dict[str, Type[BaseModel]] = {" + ", ".join(f"{e!r}: {c}" for e, c in common.items()) + "}",
        "",
    ]
    return "\n".join(parts)


TOOLS_HEADER = '''# Generated by packages/sdk-python/scripts/gen_models.py from docs/toolsets.json (exported from the
# TypeScript tool sets by `pnpm openapi`). Do not edit: run `pnpm py:gen`.
# fmt: off
"""The seed tool sets as data: each tool's name, description, output kind, input JSON Schema and input model."""

from typing import TYPE_CHECKING, Any, Dict, List, Literal, NamedTuple, Optional, Type, Union

from .._pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr, confloat, conint, conlist, constr

from .._protocol import _Open, _Strict, _Tolerant


class ToolDefinition(NamedTuple):
    """One tool as the TypeScript SDK defines it."""

    name: str
    description: str
    output: str
    json_schema: Dict[str, Any]
    input: Type[BaseModel]
'''


def generate_tools() -> str:
    document = json.loads(TOOLSETS.read_text())
    gen = Generator()
    sets: list[str] = []
    for set_name, tools in document.items():
        entries = []
        for tool in tools:
            model = gen.top(tool["inputSchema"], f"{pascal(set_name)}{pascal(tool['name'])}Input", strict=True)
            entries.append(
                f"        ToolDefinition({tool['name']!r}, {tool['description']!r}, {tool['output']!r}, {tool['inputSchema']!r}, {model}),"
            )
        sets.append(f"    {set_name!r}: [\n" + "\n".join(entries) + "\n    ],")
    helper = TOOLSMITH_HELPER.read_text()
    return "\n".join(
        [
            TOOLS_HEADER,
            gen.alias_block(),
            "\n\n".join(gen.classes),
            "",
            "",
            "#: Each seed tool set, in the seed's order.",
            "TOOL_SETS: Dict[str, List[ToolDefinition]] = {",
            *sets,
            "}",
            "",
            "#: The Python program the Toolsmith tools run in the sandbox (``python3 -c TOOLSMITH_HELPER <operation>``),",
            "#: from packages/sdk/src/tools/toolsmith-helper.py.",
            f"TOOLSMITH_HELPER = {helper!r}",
            "",
        ]
    )


def main() -> int:
    outputs = {TARGET: generate(), TOOLS_TARGET: generate_tools()}
    stale = [path for path, text in outputs.items() if not path.exists() or path.read_text() != text]
    if "--check" in sys.argv:
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale: run `pnpm py:gen`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
