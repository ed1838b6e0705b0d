"""The one place the SDK imports pydantic from, and the one place that knows its major version.

pydantic 2's own API is used when pydantic 2 is installed (``model_validate``, ``model_dump``,
``ConfigDict``), so the SDK sits beside frameworks that need pydantic 2 without going through its
``pydantic.v1`` copy; pydantic 1's API is the fallback, for Debian 12 (``python3-pydantic`` 1.10).
Everything else in the SDK (the generated models included) goes through the names defined here:
the three model bases, the constrained-type factories, and :func:`validate`, :func:`dump`,
:func:`replace`, :func:`field_aliases`, :func:`field_annotation`, :func:`validate_as` and
:func:`issues`.

Type checkers see pydantic 1's types (what the tests install); pydantic 2's entry points are read
with ``getattr`` so that either major version type-checks.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Type, TypeVar

import pydantic as _pydantic
from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError


def uses_v2_api(version: str) -> bool:
    """True when pydantic ``version`` (``pydantic.VERSION``) has pydantic 2's API; 1.x falls back to v1's."""
    major = version.strip().split(".", 1)[0]
    return major.isdigit() and int(major) >= 2


#: Whether the installed pydantic is driven through its v2 API (False: the v1 fallback).
PYDANTIC_V2 = uses_v2_api(str(getattr(_pydantic, "VERSION", getattr(_pydantic, "__version__", "1"))))


def v2_arguments(kind: str, arguments: Mapping[str, Any]) -> Dict[str, Any]:
    """pydantic 1's keyword names for a constrained type (``constr(regex=)``, ``conlist(min_items=)``)
    in pydantic 2's (``pattern``, ``min_length``); the generated models are written in v1's."""
    renames = {"constr": {"regex": "pattern"}, "conlist": {"min_items": "min_length", "max_items": "max_length"}}.get(kind, {})
    return {renames.get(name, name): value for name, value in arguments.items()}


def constr(**arguments: Any) -> Any:
    """A constrained ``str``; keywords as pydantic 1 names them (``regex=``)."""
    if PYDANTIC_V2:
        return _pydantic.constr(**v2_arguments("constr", arguments))
    return _pydantic.constr(**arguments)


def conint(**arguments: Any) -> Any:
    """A constrained ``int`` (``strict``, ``ge``, ``gt``, ``le``, ``lt``: the same in both versions)."""
    return _pydantic.conint(**arguments)


def confloat(**arguments: Any) -> Any:
    """A constrained ``float`` (the same keywords in both versions)."""
    return _pydantic.confloat(**arguments)


def conlist(item: Any, **arguments: Any) -> Any:
    """A constrained ``list``; keywords as pydantic 1 names them (``min_items=``, ``max_items=``)."""
    if PYDANTIC_V2:
        return _pydantic.conlist(item, **v2_arguments("conlist", arguments))
    return _pydantic.conlist(item, **arguments)


def _v2_config(extra: str) -> Any:
    # python-re: the schemas' patterns are ECMAScript-like (`\0`, lookahead-free but escapes Rust's
    # regex engine refuses), and Python's `re` reads them as pydantic 1 did.
    return getattr(_pydantic, "ConfigDict")(extra=extra, populate_by_name=True, regex_engine="python-re")


class StrictModel(BaseModel):
    """What a receiver checks strictly: unknown fields refused; fields are strict types, so no coercion."""

    if PYDANTIC_V2:
        model_config = _v2_config("forbid")
    else:

        class Config:
            extra = "forbid"
            allow_population_by_field_name = True
            smart_union = True


class OpenModel(BaseModel):
    """An input object the schema leaves open: unknown fields are kept."""

    if PYDANTIC_V2:
        model_config = _v2_config("allow")
    else:

        class Config:
            extra = "allow"
            allow_population_by_field_name = True
            smart_union = True


class TolerantModel(BaseModel):
    """An answer: fields a newer server adds are dropped, so it may grow within a major version."""

    if PYDANTIC_V2:
        model_config = _v2_config("ignore")
    else:

        class Config:
            extra = "ignore"
            allow_population_by_field_name = True
            smart_union = True


M = TypeVar("M", bound=BaseModel)


def validate(model: Type[M], data: Any) -> M:
    """``model.model_validate(data)`` (v2) or ``model.parse_obj(data)`` (v1)."""
    if PYDANTIC_V2:
        return getattr(model, "model_validate")(data)  # type: ignore[no-any-return]
    return model.parse_obj(data)


def dump(value: BaseModel, *, by_alias: bool = False, exclude_unset: bool = False) -> Dict[str, Any]:
    """``value.model_dump(...)`` (v2) or ``value.dict(...)`` (v1)."""
    if PYDANTIC_V2:
        return getattr(value, "model_dump")(by_alias=by_alias, exclude_unset=exclude_unset)  # type: ignore[no-any-return]
    return value.dict(by_alias=by_alias, exclude_unset=exclude_unset)


def replace(value: M, update: Mapping[str, Any]) -> M:
    """A copy of ``value`` with ``update``'s fields (by Python name) replaced, unchecked, as both versions copy."""
    if PYDANTIC_V2:
        return getattr(value, "model_copy")(update=dict(update))  # type: ignore[no-any-return]
    return value.copy(update=dict(update))


def field_aliases(model: Type[BaseModel]) -> Dict[str, str]:
    """Each field's Python name and its wire name (the alias, or the name itself)."""
    if PYDANTIC_V2:
        fields: Mapping[str, Any] = getattr(model, "model_fields")
        return {name: info.alias or name for name, info in fields.items()}
    return {name: info.alias for name, info in model.__fields__.items()}


def field_annotation(model: Type[BaseModel], name: str) -> Any:
    """The declared type of one field (``Literal['req']`` for a frame's ``type``)."""
    if PYDANTIC_V2:
        return getattr(model, "model_fields")[name].annotation
    return model.__fields__[name].outer_type_


def validate_as(annotation: Any, data: Any) -> Any:
    """Checks ``data`` against a type that is not a model (a union of models): ``TypeAdapter`` (v2)
    or ``parse_obj_as`` (v1)."""
    if PYDANTIC_V2:
        return getattr(_pydantic, "TypeAdapter")(annotation).validate_python(data)
    return _pydantic.parse_obj_as(annotation, data)


def issues(err: ValidationError, limit: int = 10) -> str:
    """A validation error's first ``limit`` problems as one line: ``where: what; ...``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:limit])


__all__ = [
    "BaseModel",
    "Field",
    "OpenModel",
    "PYDANTIC_V2",
    "StrictBool",
    "StrictFloat",
    "StrictInt",
    "StrictModel",
    "StrictStr",
    "TolerantModel",
    "ValidationError",
    "confloat",
    "conint",
    "conlist",
    "constr",
    "dump",
    "field_aliases",
    "field_annotation",
    "issues",
    "replace",
    "uses_v2_api",
    "v2_arguments",
    "validate",
    "validate_as",
]
