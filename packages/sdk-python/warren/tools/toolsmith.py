"""Seed 002 ("Toolsmith"): file tools, pylint, pytest (all, single, failing), syntax validation,
``apply_fix``, the missing-docstring count and code metrics, with packages/sdk/src/tools/toolsmith.ts's
dictionaries. The Python work runs inside the sandbox through the same helper program
(``TOOLSMITH_HELPER``, copied from the TypeScript SDK's toolsmith-helper.py); every operation is reported to ``on_log``."""

from __future__ import annotations

import datetime
import json
import math
import posixpath
import re
from typing import Any, Callable, Dict, List, Optional

from .tool import Tool, ToolError, ToolFailure, definitions, in_order, is_tool_error, to_json, tool_error
from ._definitions import TOOLSMITH_HELPER

TOOLSMITH_DEFAULT_SANDBOX_DIR = "./sandbox"
#: Seed 002's timeouts, in milliseconds.
TOOLSMITH_TIMEOUTS_MS = {"pylint": 30_000, "pytest": 60_000, "singleTest": 30_000, "helper": 30_000}

DEFAULTS: Dict[str, Dict[str, Any]] = {
    "run_pylint_analysis": {"file": None, "score": 0, "total_issues": 0, "errors": 0, "warnings": 0, "issues": [], "issues_detail": []},
    "run_pytest": {"directory": None, "passed": 0, "failed": 0, "skipped": 0, "total": 0, "success_rate": 0, "exit_code": -1, "tests": [], "error_log": ""},
    "run_single_test": {"test_file": None, "test_name": None, "passed": 0, "failed": 0, "success": False, "output": ""},
    "get_failing_tests": {"failed_count": 0, "failing_tests": [], "error_log": ""},
    "apply_fix": {"original_size": 0, "new_size": 0, "size_change": 0},
    "add_docstring": {"missing_docstrings": 0},
    "get_code_metrics": {"lines_of_code": 0, "functions": 0, "classes": 0, "has_main": False},
    "validate_python_syntax": {"valid": False},
}

_EXCEPTIONS = {
    "PATH_NOT_IN_SANDBOX": "SecurityError",
    "PATH_NOT_WRITABLE": "SecurityError",
    "FORBIDDEN": "SecurityError",
    "NOT_FOUND": "FileNotFoundError",
    "NOT_A_DIRECTORY": "NotADirectoryError",
    "IS_A_DIRECTORY": "IsADirectoryError",
    "REQUEST_TIMEOUT": "TimeoutExpired",
}


def to_sandbox_path(path: str, sandbox_dir: str = TOOLSMITH_DEFAULT_SANDBOX_DIR) -> str:
    """A path under ``sandbox_dir`` loses that prefix; any other is taken from the sandbox root as it is."""

    def normalise(p: str) -> str:
        return re.sub(r"/+$", "", posixpath.normpath(p)) if p else "."

    folder, target = normalise(sandbox_dir), normalise(path)
    if target == folder:
        return "."
    if target.startswith(f"{folder}/"):
        return target[len(folder) + 1 :]
    return target


def toolsmith_exception_name(code: str) -> str:
    return _EXCEPTIONS.get(code, "Exception")


def toolsmith_error(error: ToolError, file_path: Optional[str], operation: str, defaults: Dict[str, Any]) -> ToolError:
    """Seed 002's error dictionary: the exception and what went wrong, the path, the operation, its defaults."""
    extra = {k: v for k, v in error.items() if k not in ("isError", "code", "error", "suggestion", "exception")}
    name = error["exception"] if isinstance(error.get("exception"), str) else toolsmith_exception_name(error["code"])
    message = error["error"] if error["error"].startswith(f"{name}:") else f"{name}: {error['error']}"
    result: ToolError = {"isError": True, "error": message, "file_path": file_path, "operation": operation, **defaults}
    result.update(extra)
    result["code"] = error["code"]
    if error.get("suggestion") is not None:
        result["suggestion"] = error["suggestion"]
    return result


def json_text(result: Any) -> str:
    if is_tool_error(result):
        return to_json({k: v for k, v in result.items() if k != "isError"})
    return to_json(result)


def _round_rate(passed: int, total: int) -> float:
    # JavaScript's Math.round: halves go up.
    return 0 if total == 0 else math.floor(passed / total * 10_000 + 0.5) / 100


def summarise_pytest(directory: str, run: Dict[str, Any]) -> Dict[str, Any]:
    tests = run["tests"]
    passed = sum(1 for t in tests if t["status"] == "passed")
    failed = sum(1 for t in tests if t["status"] in ("failed", "error"))
    skipped = sum(1 for t in tests if t["status"] == "skipped")
    total = passed + failed + skipped
    problem = failed > 0 or run["exit_code"] not in (0, 5)
    return {
        "directory": directory,
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "total": total,
        "success_rate": _round_rate(passed, total),
        "exit_code": run["exit_code"],
        "tests": [{"name": t["name"], "status": t["status"]} for t in tests],
        "error_log": run["output"] if problem else "",
    }


def summarise_failures(run: Dict[str, Any]) -> Dict[str, Any]:
    failing = [t for t in run["tests"] if t["status"] in ("failed", "error")]
    problem = bool(failing) or run["exit_code"] not in (0, 5)
    return {"failed_count": len(failing), "failing_tests": failing, "error_log": run["output"] if problem else ""}


def toolsmith_tools(sandbox: Any, *, on_log: Optional[Callable[[Dict[str, Any]], None]] = None) -> List[Tool]:
    """Seed 002's tools over a sandbox; ``on_log`` receives every operation's log entry."""
    files, commands = sandbox.files, sandbox.commands
    defs = definitions("toolsmith")

    async def helper(args: List[str], *, what: str, timeout_ms: int, stdin: str = "", cwd: Optional[str] = None) -> Dict[str, Any]:
        result = await commands.run(["python3", "-c", TOOLSMITH_HELPER, *args], stdin=stdin, timeout=timeout_ms / 1000, cwd=cwd)
        if result.timed_out:
            raise ToolFailure(
                tool_error(
                    "REQUEST_TIMEOUT",
                    f"{what} exceeded {timeout_ms // 1000} seconds and was stopped.",
                    "Simplify the test cases or analyse a smaller file.",
                    exception="TimeoutExpired",
                )
            )
        line = result.stdout.rstrip().split("\n")[-1]
        try:
            answer = json.loads(line)
        except ValueError:
            tail = (result.stderr or result.stdout)[-2000:].strip()
            raise ToolFailure(
                tool_error("INTERNAL", f"{what} failed in the sandbox (exit code {result.exit_code}): {tail}", "Check that python3 is installed in the sandbox image.")
            ) from None
        syntax_error = answer.get("syntax_error")
        if syntax_error:
            raise ToolFailure(
                tool_error(
                    "INVALID_ARGUMENTS",
                    f"{syntax_error['message']} (line {syntax_error['line']}, column {syntax_error['offset']})",
                    "Fix the syntax error first.",
                    exception="SyntaxError",
                    line=syntax_error["line"],
                    offset=syntax_error["offset"],
                )
            )
        if isinstance(answer.get("failure"), str):
            raise ToolFailure(tool_error("INTERNAL", f"{what} failed in the sandbox: {answer['failure']}"))
        return answer  # type: ignore[no-any-return]

    async def read_source(path: str, sandbox_dir: str) -> str:
        return await files.read_text(to_sandbox_path(path, sandbox_dir))  # type: ignore[no-any-return]

    def syntax_problem(answer: Dict[str, Any], tail: str, suggestion: str, **extra: Any) -> ToolError:
        return tool_error(
            "INVALID_ARGUMENTS",
            f"{js(answer.get('message'))} (line {js(answer.get('line'))}, column {js(answer.get('offset'))}){tail}",
            suggestion,
            exception="SyntaxError",
            line=answer.get("line"),
            offset=answer.get("offset"),
            **extra,
        )

    def tool(name: str, execute: Any, action: str, path_arg: Optional[str], defaults: Callable[[Dict[str, Any]], Dict[str, Any]], details: Any) -> Tool:
        def on_error(error: ToolError, args: Any) -> ToolError:
            given = args if isinstance(args, dict) else {}
            return toolsmith_error(error, given.get(path_arg) if path_arg else None, name, defaults(given))

        inner = Tool(defs[name], execute, on_error, json_text if defs[name].output == "json" else _read_text)

        async def run(args: Any) -> Any:
            result = await Tool.run(inner, args)
            record = args if isinstance(args, dict) else {}
            failed = is_tool_error(result)
            if on_log is not None:
                entry_details = {**details(record, result), "error": result["error"]} if failed else details(record, result)
                on_log(
                    {
                        "agent": "Toolsmith",
                        "action": action,
                        "operation": name,
                        "status": "error" if failed else "success",
                        "details": entry_details,
                        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                    }
                )
            return result

        inner.run = run  # type: ignore[method-assign,assignment]
        return inner

    async def read_file(a: Any) -> str:
        return await read_source(a.file_path, a.sandbox_dir)

    async def write_file(a: Any) -> bool:
        await files.write(to_sandbox_path(a.file_path, a.sandbox_dir), a.content)
        return True

    async def list_files(a: Any) -> List[str]:
        found = await files.glob(to_sandbox_path(a.directory, a.sandbox_dir), "**/*.py")
        return sorted(f"{re.sub(r'/+$', '', a.directory)}/{rel}" for rel in found)

    async def pylint(a: Any) -> Dict[str, Any]:
        await read_source(a.file_path, a.sandbox_dir)
        analysis = await helper(["pylint", to_sandbox_path(a.file_path, a.sandbox_dir)], what="pylint", timeout_ms=TOOLSMITH_TIMEOUTS_MS["pylint"])
        return {"file": a.file_path, **analysis}

    async def run_pytest(a: Any) -> Dict[str, Any]:
        run = await helper(["pytest", ".", "."], what="pytest", timeout_ms=TOOLSMITH_TIMEOUTS_MS["pytest"], cwd=to_sandbox_path(a.directory, a.sandbox_dir))
        return summarise_pytest(a.directory, run)

    async def run_single_test(a: Any) -> Dict[str, Any]:
        await read_source(a.test_file, a.sandbox_dir)
        target = to_sandbox_path(a.test_file, a.sandbox_dir) + (f"::{a.test_name}" if a.test_name else "")
        run = await helper(["pytest", target, "."], what="pytest", timeout_ms=TOOLSMITH_TIMEOUTS_MS["singleTest"])
        passed = sum(1 for t in run["tests"] if t["status"] == "passed")
        failed = sum(1 for t in run["tests"] if t["status"] in ("failed", "error"))
        success = run["exit_code"] == 0 and failed == 0 and passed > 0
        return {"test_file": a.test_file, "test_name": a.test_name, "passed": passed, "failed": failed, "success": success, "output": run["output"]}

    async def failing(a: Any) -> Dict[str, Any]:
        run = await helper(["pytest", ".", "."], what="pytest", timeout_ms=TOOLSMITH_TIMEOUTS_MS["pytest"], cwd=to_sandbox_path(a.directory, a.sandbox_dir))
        return summarise_failures(run)

    async def validate(a: Any) -> Any:
        answer = await helper(["syntax"], what="syntax validation", timeout_ms=TOOLSMITH_TIMEOUTS_MS["helper"], stdin=a.code)
        if answer.get("valid") is True:
            return {"valid": True}
        return syntax_problem(answer, "", "Fix the syntax error and validate again.", text=answer.get("text"))

    async def apply_fix(a: Any) -> Any:
        original = await read_source(a.file_path, a.sandbox_dir)
        check = await helper(["syntax"], what="syntax validation", timeout_ms=TOOLSMITH_TIMEOUTS_MS["helper"], stdin=a.fixed_code)
        if check.get("valid") is not True:
            return syntax_problem(check, "; the file was not changed.", "Fix the syntax error in fixed_code and apply again.")
        await files.write(to_sandbox_path(a.file_path, a.sandbox_dir), a.fixed_code)
        return {"file_path": a.file_path, "original_size": len(original), "new_size": len(a.fixed_code), "size_change": len(a.fixed_code) - len(original)}

    async def docstrings(a: Any) -> Dict[str, Any]:
        source = await read_source(a.file_path, a.sandbox_dir)
        answer = await helper(["docstrings"], what="docstring analysis", timeout_ms=TOOLSMITH_TIMEOUTS_MS["helper"], stdin=source)
        return {"file_path": a.file_path, "missing_docstrings": answer["missing_docstrings"]}

    async def metrics(a: Any) -> Dict[str, Any]:
        source = await read_source(a.file_path, a.sandbox_dir)
        answer = await helper(["metrics"], what="code metrics", timeout_ms=TOOLSMITH_TIMEOUTS_MS["helper"], stdin=source)
        return {"file_path": a.file_path, **{k: answer.get(k) for k in ("lines_of_code", "functions", "classes", "has_main")}}

    def size(text: Any) -> int:
        return len(text.encode("utf-8")) if isinstance(text, str) else 0

    none: Callable[[Dict[str, Any]], Dict[str, Any]] = lambda given: {}  # noqa: E731
    fixed = lambda name: (lambda given: DEFAULTS[name])  # noqa: E731
    return in_order(
        "toolsmith",
        {
            "read_file": tool("read_file", read_file, "ANALYSIS", "file_path", none, lambda a, r: {"file_path": a.get("file_path"), "size": len(r) if isinstance(r, str) else 0}),
            "write_file": tool("write_file", write_file, "FIX", "file_path", none, lambda a, r: {"file_path": a.get("file_path"), "bytes_written": size(a.get("content"))}),
            "list_files": tool(
                "list_files", list_files, "ANALYSIS", "directory", lambda given: {"files": []}, lambda a, r: {"directory": a.get("directory"), "file_count": len(r) if isinstance(r, list) else 0}
            ),
            "run_pylint_analysis": tool(
                "run_pylint_analysis",
                pylint,
                "ANALYSIS",
                "file_path",
                lambda given: {**DEFAULTS["run_pylint_analysis"], "file": given.get("file_path")},
                lambda a, r: {"file_path": a.get("file_path"), "score": r.get("score"), "total_issues": r.get("total_issues")},
            ),
            "run_pytest": tool(
                "run_pytest",
                run_pytest,
                "ANALYSIS",
                "directory",
                lambda given: {**DEFAULTS["run_pytest"], "directory": given.get("directory")},
                lambda a, r: {k: (a.get(k) if k == "directory" else r.get(k)) for k in ("directory", "passed", "failed", "total", "success_rate")},
            ),
            "run_single_test": tool(
                "run_single_test",
                run_single_test,
                "ANALYSIS",
                "test_file",
                lambda given: {**DEFAULTS["run_single_test"], "test_file": given.get("test_file"), "test_name": given.get("test_name")},
                lambda a, r: {"test_file": a.get("test_file"), "test_name": a.get("test_name"), "success": r.get("success")},
            ),
            "get_failing_tests": tool(
                "get_failing_tests", failing, "ANALYSIS", "directory", fixed("get_failing_tests"), lambda a, r: {"directory": a.get("directory"), "failed_count": r.get("failed_count")}
            ),
            "validate_python_syntax": tool("validate_python_syntax", validate, "ANALYSIS", None, fixed("validate_python_syntax"), lambda a, r: {"valid": not is_tool_error(r)}),
            "apply_fix": tool("apply_fix", apply_fix, "FIX", "file_path", fixed("apply_fix"), lambda a, r: {"file_path": a.get("file_path"), "size_change": r.get("size_change")}),
            "add_docstring": tool(
                "add_docstring", docstrings, "ANALYSIS", "file_path", fixed("add_docstring"), lambda a, r: {"file_path": a.get("file_path"), "missing_docstrings": r.get("missing_docstrings")}
            ),
            "get_code_metrics": tool(
                "get_code_metrics", metrics, "ANALYSIS", "file_path", fixed("get_code_metrics"), lambda a, r: {"file_path": a.get("file_path"), "lines_of_code": r.get("lines_of_code")}
            ),
        },
    )


def js(value: Any) -> str:
    """``String(value)`` in JavaScript: ``null`` for None, ``true``/``false`` for booleans."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _read_text(result: Any) -> str:
    return result if isinstance(result, str) else json_text(result)
