"""The Python side of the Toolsmith tools (packages/sdk/src/tools/toolsmith.ts).

Run inside the sandbox as `python3 -c <this text> <operation> [args...]` (argv, no shell, nothing
written to the workspace). Source code to analyse arrives on stdin (the SDK reads it through the
file policy first); the answer is one JSON object on the last line of stdout.
"""
import ast, io, json, os, subprocess, sys, tempfile, contextlib
import xml.etree.ElementTree as ET

OUTPUT_CAP = 200000

def out(value):
    sys.stdout.write("\n" + json.dumps(value) + "\n")

def syntax(code):
    try:
        compile(code, "<string>", "exec", dont_inherit=True)
        return {"valid": True}
    except SyntaxError as e:
        return {"valid": False, "message": e.msg, "line": e.lineno, "offset": e.offset, "text": (e.text or "").rstrip("\n")}

def docstrings(code):
    tree = ast.parse(code)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {"missing_docstrings": sum(1 for n in ast.walk(tree) if isinstance(n, kinds) and ast.get_docstring(n) is None)}

def is_main_test(node):
    t = node.test
    if not isinstance(t, ast.Compare) or len(t.ops) != 1 or not isinstance(t.ops[0], ast.Eq):
        return False
    sides = [t.left, t.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1

def metrics(code):
    tree = ast.parse(code)
    nodes = list(ast.walk(tree))
    return {
        "lines_of_code": len(code.splitlines()),
        "functions": sum(1 for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
        "classes": sum(1 for n in nodes if isinstance(n, ast.ClassDef)),
        "has_main": any(isinstance(n, ast.If) and is_main_test(n) for n in tree.body),
    }

def pylint(path):
    from pylint.lint import Run
    from pylint.reporters import CollectingReporter
    reporter = CollectingReporter()
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        run = Run([path, "--reports=n", "--persistent=n"], reporter=reporter, exit=False)
    issues = [{
        "type": m.category, "module": m.module, "obj": m.obj, "line": m.line, "column": m.column,
        "endLine": m.end_line, "endColumn": m.end_column, "path": m.path, "symbol": m.symbol,
        "message": m.msg, "message-id": m.msg_id,
    } for m in reporter.messages]
    score = getattr(run.linter.stats, "global_note", 0.0) or 0.0
    return {
        "score": round(float(score), 2),
        "total_issues": len(issues),
        "errors": sum(1 for i in issues if i["type"] in ("error", "fatal")),
        "warnings": sum(1 for i in issues if i["type"] == "warning"),
        "issues": issues[:20],
        "issues_detail": [{k: i[k] for k in ("line", "column", "type", "symbol", "message")} for i in issues[:10]],
    }

def nodeid(case):
    file = case.get("file") or ""
    name = case.get("name") or ""
    classname = case.get("classname") or ""
    module = file[:-3].replace("/", ".") if file.endswith(".py") else ""
    classes = classname[len(module) + 1:] if module and classname.startswith(module + ".") else ""
    parts = [file or classname] + ([c for c in classes.split(".") if c] if classes else []) + [name]
    return "::".join(parts)

def pytest(target, cwd):
    fd, xml_path = tempfile.mkstemp(suffix=".xml")
    os.close(fd)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
             "--junitxml=" + xml_path, "-q", "--tb=short", "--color=no"],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        tests = []
        try:
            root = ET.parse(xml_path).getroot()
            for case in root.iter("testcase"):
                status, message = "passed", ""
                for child in case:
                    if child.tag in ("failure", "error"):
                        status, message = ("failed" if child.tag == "failure" else "error"), child.get("message") or ""
                    elif child.tag == "skipped":
                        status, message = "skipped", child.get("message") or ""
                tests.append({"name": nodeid(case.attrib), "status": status, "message": message})
        except (ET.ParseError, OSError):
            pass
        # The report file is ours, not the model's business.
        output = "".join(l for l in proc.stdout.splitlines(True) if "generated xml file:" not in l)
        if len(output) > OUTPUT_CAP:
            output = "[... " + str(len(output) - OUTPUT_CAP) + " characters cut ...]\n" + output[-OUTPUT_CAP:]
        return {"exit_code": proc.returncode, "output": output, "tests": tests}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(xml_path)

OPERATIONS = {
    "syntax": lambda: syntax(sys.stdin.read()),
    "docstrings": lambda: docstrings(sys.stdin.read()),
    "metrics": lambda: metrics(sys.stdin.read()),
    "pylint": lambda: pylint(sys.argv[2]),
    "pytest": lambda: pytest(sys.argv[2], sys.argv[3]),
}
try:
    out(OPERATIONS[sys.argv[1]]())
except SyntaxError as e:
    out({"syntax_error": {"message": e.msg, "line": e.lineno, "offset": e.offset}})
except Exception as e:
    out({"failure": type(e).__name__ + ": " + str(e)})
