"""``sandbox.code``: a code interpreter, the twin of the TypeScript SDK's ``sandbox.code`` (docs/code.md).

Cells run in a context's kernel (a Jupyter kernel for Python, a Node process for JavaScript and
TypeScript), which keeps variables and imports from one run to the next; contexts never share state.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Union

from ._protocol import CodeCreateContextResult, CodeRunResult, CodeRunResultErrorVariant1, CodeRunResultResultsItem
from ._pydantic import BaseModel
from .commands import with_output
from .connection import DEFAULT_CALL_TIMEOUT, Caller

#: A language a context runs.
CodeLanguage = Literal["python", "javascript", "typescript"]
#: One context: its ``id``, ``language``, ``cwd``, whether it is ``alive`` and ``busy``, ``created_at``.
CodeContextInfo = CodeCreateContextResult
#: One rich output of a cell: ``data`` by MIME type (``text/plain``, ``image/png`` as base64, ...);
#: the last expression's value has ``is_main_result``.
CodeDisplay = CodeRunResultResultsItem
#: The error a cell raised: ``name``, ``value`` and ``traceback``.
CodeError = CodeRunResultErrorVariant1

__all__ = ["Code", "CodeContextInfo", "CodeDisplay", "CodeError", "CodeLanguage", "CodeRunResult", "DisplayImage", "display_image"]

# A first run starts the kernel (seconds), and a cell that ignores its interrupt gets a grace period
# before its kernel is killed: the call waits this much past the cell's own timeout, in seconds.
ANSWER_GRACE = 100.0


def _context_id(context: Union[str, CodeContextInfo]) -> str:
    return context if isinstance(context, str) else context.id


class Code:
    """``sandbox.code``: runs cells in kernels that keep their state (docs/code.md).

    Example::

        await sandbox.code.run('import pandas as pd\\ndf = pd.DataFrame({"x": [1, 2, 3]})')
        result = await sandbox.code.run("df.x.sum()")
        print(result.results[0].data["text/plain"])  # '6'
    """

    def __init__(self, connection: Callable[[], Caller]) -> None:
        self._connection = connection

    async def run(
        self,
        code: str,
        *,
        language: Optional[CodeLanguage] = None,
        context: Optional[Union[str, CodeContextInfo]] = None,
        timeout: Optional[float] = None,
        output_cap_bytes: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        on_stdout: Optional[Callable[[str], None]] = None,
        on_stderr: Optional[Callable[[str], None]] = None,
        on_result: Optional[Callable[[CodeDisplay], None]] = None,
        on_error: Optional[Callable[[CodeError], None]] = None,
    ) -> CodeRunResult:
        """Runs one cell and answers with its ``stdout``, ``stderr``, rich ``results`` and ``error``.
        An error in the code is information in the result, not an exception.

        ``language`` picks the default context when ``context`` (from :meth:`create_context`, or
        its id) is absent; Python by default. ``timeout`` (seconds, 60 by default) interrupts the
        cell; the kernel and its variables stay. ``env`` holds for this cell only. ``on_*`` get
        output, rich results and the error as they are produced.

        Example::

            chart = await sandbox.code.run("import matplotlib.pyplot as plt\\nplt.plot([1, 3, 2])")
            image = display_image(chart.results[0])  # the PNG, checked, or None
        """
        limit = DEFAULT_CALL_TIMEOUT if timeout is None else timeout
        params: Dict[str, Any] = {"code": code, "timeoutMs": max(1, int(limit * 1000))}
        for key, value in (("language", language), ("context", None if context is None else _context_id(context)), ("outputCapBytes", output_cap_bytes)):
            if value is not None:
                params[key] = value
        if env is not None:
            params["env"] = dict(env)
        streams = {"stdout": on_stdout, "stderr": on_stderr}
        streaming = any(c is not None for c in (on_stdout, on_stderr, on_result, on_error))
        decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in streams}

        def on_event(name: str, data: BaseModel, payload: Optional[bytes]) -> None:
            callback = streams.get(name)
            if callback is not None and payload:
                text = decoders[name].decode(payload)
                if text:
                    callback(text)
            elif name == "result" and on_result is not None:
                on_result(data)  # type: ignore[arg-type]
            elif name == "error" and on_error is not None:
                on_error(data)  # type: ignore[arg-type]

        if streaming:
            params["stream"] = True
        result, body = await self._connection().call("code.run", params, on_event=on_event if streaming else None, timeout=limit + ANSWER_GRACE)
        for name, callback in streams.items():
            rest = decoders[name].decode(b"", final=True)
            if rest and callback is not None:
                callback(rest)
        return with_output(result, body)

    async def create_context(
        self,
        *,
        language: Optional[CodeLanguage] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> CodeContextInfo:
        """Makes a context with its own kernel and state, and answers once the kernel is ready.
        ``cwd`` is resolved through the sandbox's policy; ``env`` is laid over the sandbox's.

        Example::

            js = await sandbox.code.create_context(language="javascript", cwd="web")
            await sandbox.code.run("const n = 2", context=js)
        """
        params: Dict[str, Any] = {}
        for key, value in (("language", language), ("cwd", cwd)):
            if value is not None:
                params[key] = value
        if env is not None:
            params["env"] = dict(env)
        result, _ = await self._connection().call("code.createContext", params, timeout=ANSWER_GRACE if timeout is None else timeout)
        return result  # type: ignore[no-any-return]

    async def list_contexts(self, *, timeout: Optional[float] = None) -> List[CodeContextInfo]:
        """The sandbox's contexts, the default ones among them once used."""
        result, _ = await self._connection().call("code.listContexts", {}, timeout=timeout)
        return list(result.contexts)

    async def restart_context(self, context: Union[str, CodeContextInfo], *, timeout: Optional[float] = None) -> CodeContextInfo:
        """Stops a context's kernel and starts a fresh one: every variable is gone. The way back
        after ``KernelDiedError``.

        Example::

            await sandbox.code.restart_context("default-python")
        """
        result, _ = await self._connection().call("code.restartContext", {"context": _context_id(context)}, timeout=ANSWER_GRACE if timeout is None else timeout)
        return result  # type: ignore[no-any-return]

    async def remove_context(self, context: Union[str, CodeContextInfo], *, timeout: Optional[float] = None) -> bool:
        """Stops a context's kernel and forgets the context; False when there was none."""
        result, _ = await self._connection().call("code.removeContext", {"context": _context_id(context)}, timeout=timeout)
        return bool(result.removed)


#: The raster image types a display output may carry, with the bytes each format starts with.
_IMAGE_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")


@dataclass
class DisplayImage:
    """A PNG or JPEG a display output holds, checked: its MIME type, base64 text and bytes."""

    mime_type: str
    base64: str
    data: bytes


def display_image(display: CodeDisplay) -> Optional[DisplayImage]:
    """The first PNG or JPEG of a display output, only when it is what it says: valid base64
    (Jupyter's line breaks removed) whose bytes start with the format's signature. A value the cell
    made up gives None, so it is never passed on to a model API or written as an image file.

    Example::

        image = display_image(result.results[0])
        if image is not None:
            Path("chart.png").write_bytes(image.data)
    """
    for mime_type, signature in _IMAGE_SIGNATURES.items():
        value = display.data.get(mime_type)
        if not isinstance(value, str):
            continue
        text = re.sub(r"\s+", "", value)
        if len(text) % 4 != 0 or not _BASE64.match(text):
            continue
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(data) > len(signature) and data.startswith(signature):
            return DisplayImage(mime_type, text, data)
    return None
