"""The one place the SDK imports pydantic from.

The SDK is written against pydantic's v1 API, which Debian 12 ships (``python3-pydantic`` 1.10).
pydantic 2 keeps that API, unchanged, as ``pydantic.v1``; the agent frameworks the adapters serve
(LangChain, the OpenAI Agents SDK) need pydantic 2, so the SDK must install next to it. Importing
from here picks the v1 API under either major version, and nothing else in the SDK names pydantic.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # checked against the v1 API as pydantic 1 types it (the tests' Debian 1.10)
    import pydantic as _v1_api
else:
    try:  # pydantic 2 (and 1.10.17 or newer, which added the same alias)
        import pydantic.v1 as _v1_api
    except ImportError:  # pydantic 1.10 before the alias, as Debian 12 ships it
        import pydantic as _v1_api

BaseModel = _v1_api.BaseModel
Extra = _v1_api.Extra
Field = _v1_api.Field
StrictBool = _v1_api.StrictBool
StrictFloat = _v1_api.StrictFloat
StrictInt = _v1_api.StrictInt
StrictStr = _v1_api.StrictStr
ValidationError = _v1_api.ValidationError
confloat = _v1_api.confloat
conint = _v1_api.conint
conlist = _v1_api.conlist
constr = _v1_api.constr
parse_obj_as = _v1_api.parse_obj_as

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
