"""Size limits of the source: no file in src/tapegrad over 700 lines, no function over 80.

A file or function past the limit usually does several jobs; split it along them.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tapegrad"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80

EXEMPT: set[str] = set()  # none: every file and function is within the limits


def _oversized(root=SRC):
    problems = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in EXEMPT:
            continue
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            problems.append(f"{rel}: {lines} lines (limit {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    problems.append(
                        f"{rel}:{node.lineno} {node.name}: {length} lines "
                        f"(limit {MAX_FUNCTION_LINES})"
                    )
    return problems


def test_no_file_or_function_over_the_limits():
    problems = _oversized()
    assert not problems, "over the size limits:\n" + "\n".join(problems)


def test_the_checker_names_a_long_file_and_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    padding = "\n" * MAX_FILE_LINES
    (tmp_path / "long.py").write_text(f"def too_long():\n{body}\n{padding}", encoding="utf-8")
    assert _oversized(tmp_path) == [
        f"long.py: {MAX_FILE_LINES + MAX_FUNCTION_LINES + 1} lines (limit {MAX_FILE_LINES})",
        f"long.py:1 too_long: {MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})",
    ]
