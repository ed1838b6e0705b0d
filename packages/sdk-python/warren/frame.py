"""The wire's frame: a 4-byte big-endian header length, a JSON header, then the payload bytes.

Decoding checks what the TypeScript SDK checks: the frame and header size caps, a JSON header that
matches the frame header schema. A frame that cannot be read raises a :class:`WarrenError` whose
``details`` carry the request id when one could be read, so the caller it names can be told.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Dict, Optional, Type, Union, get_args

from ._pydantic import BaseModel, ValidationError, field_annotation, validate

from ._protocol import MAX_FRAME_BYTES, MAX_HEADER_BYTES, FrameHeader
from .errors import FrameTooLargeError, InvalidFrameError

RequestId = Union[int, str]

# The frame header schema is a union discriminated by `type`: each frame is checked against its own member.
_BY_TYPE: Dict[str, Type[BaseModel]] = {get_args(field_annotation(m, "type"))[0]: m for m in get_args(FrameHeader)}

_LENGTH = struct.Struct(">I")
#: How far into a header :func:`frame_request_id` looks for a top-level ``id``.
ID_SCAN_BYTES = 4096


@dataclass
class Frame:
    """A decoded frame: the header as sent (checked against the schema) and the payload bytes."""

    header: Dict[str, Any]
    payload: Optional[bytes] = None


def encode_frame(header: Dict[str, Any], payload: Optional[bytes] = None) -> bytes:
    """Encodes one frame; refuses (as the receiver would) a header or frame over the caps."""
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    ident = {"id": header["id"]} if header.get("id") is not None else {}
    if len(text) > MAX_HEADER_BYTES:
        raise FrameTooLargeError(
            f"This {header.get('type')} frame's header is {len(text)} bytes, over the {MAX_HEADER_BYTES}-byte limit. "
            "Ask for less at once (a smaller limit or range, or the next page); a large value belongs in a file.",
            details={**ident, "limit": MAX_HEADER_BYTES},
        )
    total = _LENGTH.size + len(text) + (len(payload) if payload else 0)
    if total > MAX_FRAME_BYTES:
        raise FrameTooLargeError(
            f"This {header.get('type')} frame is {total} bytes, over the {MAX_FRAME_BYTES}-byte limit. "
            "Send or ask for less per call: a range of a file, or content in pieces.",
            details={**ident, "limit": MAX_FRAME_BYTES},
        )
    return b"".join((_LENGTH.pack(len(text)), text, payload or b""))


def decode_frame(data: Union[bytes, str]) -> Frame:
    """Decodes and checks one frame; raises InvalidFrameError or FrameTooLargeError."""
    if isinstance(data, str):
        raise InvalidFrameError("Text frames are not part of the protocol; the server must send binary frames.")
    if len(data) > MAX_FRAME_BYTES:
        raise FrameTooLargeError(f"Frame of {len(data)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit.", details=_id_details(data))
    if len(data) < _LENGTH.size:
        raise InvalidFrameError("Frame is shorter than its 4-byte length prefix.")
    (length,) = _LENGTH.unpack_from(data)
    if length > MAX_HEADER_BYTES:
        raise FrameTooLargeError(f"Frame header of {length} bytes exceeds the {MAX_HEADER_BYTES}-byte limit.", details=_id_details(data))
    if _LENGTH.size + length > len(data):
        raise InvalidFrameError("Frame header length runs past the end of the frame.")
    try:
        raw = json.loads(data[_LENGTH.size : _LENGTH.size + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidFrameError("Frame header is not valid JSON.") from None
    model = _BY_TYPE.get(str(raw.get("type"))) if isinstance(raw, dict) else None
    try:
        if model is None:
            raise InvalidFrameError(f"Frame header is invalid: type: must be one of {', '.join(sorted(_BY_TYPE))}", details=_header_id(raw))
        validate(model, raw)
    except ValidationError as err:
        raise InvalidFrameError(f"Frame header is invalid: {_issues(err)}", details=_header_id(raw)) from None
    payload = data[_LENGTH.size + length :]
    return Frame(raw, bytes(payload) if payload else None)


def frame_request_id(data: bytes) -> Optional[RequestId]:
    """The request id a frame carries, read from the top-level keys of its header's first 4 KiB.

    A frame too large to decode can still be answered with its id; a string inside the params cannot
    pose as it, because only top-level keys are read.
    """
    if len(data) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack_from(data)
    end = min(len(data), _LENGTH.size + length, _LENGTH.size + ID_SCAN_BYTES)
    text = data[_LENGTH.size : end].decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        return None
    at += 1
    try:
        while True:
            key, at = decoder.raw_decode(text, _skip(text, at))
            at = _skip(text, at)
            if text[at : at + 1] != ":":
                return None
            value, at = decoder.raw_decode(text, _skip(text, at + 1))
            if key == "id":
                return value if _valid_id(value) else None
            at = _skip(text, at)
            if text[at : at + 1] != ",":
                return None
            at += 1
    except ValueError:
        return None  # the window ended inside a value: no id to recover


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 <= value <= 9007199254740991
    return isinstance(value, str) and 1 <= len(value) <= 64


def _header_id(raw: Any) -> Optional[Dict[str, Any]]:
    ident = raw.get("id") if isinstance(raw, dict) else None
    return {"id": ident} if _valid_id(ident) else None


def _id_details(data: bytes) -> Optional[Dict[str, Any]]:
    ident = frame_request_id(data)
    return None if ident is None else {"id": ident}


def _issues(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:10])
