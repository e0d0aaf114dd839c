"""Keep the commands shown in docs/ true: every block marked `<!-- kvcalc: ARGS -->` holds the real output of
`kvcalc ARGS`. `python tests/docs_sync.py --write` refreshes them; tests/test_docs.py calls `stale_blocks()` and
fails on drift. A repository tool: it lives in tests/, not in the package.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find cli_helper beside it

from cli_helper import invoke  # noqa: E402

BLOCK = re.compile(r"<!-- kvcalc: (?P<args>.+?) -->\n```(?:console|text)?\n(?P<body>.*?)```\n<!-- /kvcalc -->", re.S)
WIDTH = "150"


def run_kvcalc(args: str) -> tuple[int, str]:
    os.environ["COLUMNS"] = WIDTH  # a fixed table width, whatever terminal the docs are built in
    code, out, err = invoke(shlex.split(args))
    lines = err.splitlines(keepends=True)
    gate = lines[-1:] if lines and lines[-1].startswith("gate failed: ") else []  # printed after the output
    text = "".join(lines[:len(lines) - len(gate)]) + out + "".join(gate)
    return code, "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def render_block(args: str) -> str:
    code, output = run_kvcalc(args)
    gate = code == 1 and output.splitlines()[-1].startswith("gate failed: ")  # a gate's answer (kvcalc/gate.py)
    if code != 0 and not gate:
        raise RuntimeError(f"`kvcalc {args}` exited with {code}:\n{output}")
    return f"<!-- kvcalc: {args} -->\n```console\n$ kvcalc {args}\n{output}```\n<!-- /kvcalc -->"


def doc_files(root: Path) -> list[Path]:
    return sorted((root / "docs").rglob("*.md")) + [root / "README.md"]


def stale_blocks(root: Path) -> list[tuple[Path, str]]:
    """(file, args) of every block whose shown output differs from what kvcalc prints now."""
    stale = []
    for path in doc_files(root):
        for match in BLOCK.finditer(path.read_text()):
            if match.group(0) != render_block(match.group("args")):
                stale.append((path, match.group("args")))
    return stale


def write(root: Path) -> int:
    changed = 0
    for path in doc_files(root):
        text = path.read_text()
        new = BLOCK.sub(lambda m: render_block(m.group("args")), text)
        if new != text:
            path.write_text(new)
            changed += 1
    return changed


if __name__ == "__main__":
    repo = Path(__file__).resolve().parent.parent
    if "--write" in sys.argv:
        print(f"updated {write(repo)} file(s)")
    else:
        for path, args in stale_blocks(repo):
            print(f"stale: {path}: kvcalc {args}")
