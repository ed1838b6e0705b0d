"""The one place the SDK imports pydantic from.

The SDK is written against pydantic's v1 API, which Debian 12 ships (``python3-pydantic`` 1.10).
pydantic 2 keeps that API, unchanged, as ``pydantic.v1``; the agent frameworks the adapters serve
(LangChain, the OpenAI Agents SDK) need pydantic 2, so the SDK must install next to it. Importing
from here picks the v1 API under either major version, and nothing else in the SDK names pydantic.
"""

try:  # pydantic 2 (and 1.10.17 or newer, which added the same alias)
    from pydantic.v1 import (
        BaseModel,
        Extra,
        Field,
        StrictBool,
        StrictFloat,
        StrictInt,
        StrictStr,
        ValidationError,
        confloat,
        conint,
        conlist,
        constr,
        parse_obj_as,
    )
except ImportError:  # pydantic 1.10 before the alias, as Debian 12 ships it
    from pydantic import (  # type: ignore[assignment,no-redef]
        BaseModel,
        Extra,
        Field,
        StrictBool,
        StrictFloat,
        StrictInt,
        StrictStr,
        ValidationError,
        confloat,
        conint,
        conlist,
        constr,
        parse_obj_as,
    )

__all__ = [
    "BaseModel",
    "Extra",
    "Field",
    "StrictBool",
    "StrictFloat",
    "StrictInt",
    "StrictStr",
    "ValidationError",
    "confloat",
    "conint",
    "conlist",
    "constr",
    "parse_obj_as",
]
