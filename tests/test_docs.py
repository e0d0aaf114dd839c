"""Every `kvcalc` command shown in docs/ and README.md runs, and prints exactly what the docs show."""

from pathlib import Path

from docs_sync import BLOCK, doc_files, stale_blocks

ROOT = Path(__file__).resolve().parent.parent


def test_docs_show_real_output():
    stale = stale_blocks(ROOT)
    assert not stale, "docs drifted from the tool; run `python tests/docs_sync.py --write`: " + ", ".join(
        f"{p.name}: kvcalc {a}" for p, a in stale)


def test_docs_have_executed_examples():
    blocks = [m for p in doc_files(ROOT) if p.exists() for m in BLOCK.finditer(p.read_text())]
    assert len(blocks) >= 1


def _shown_commands():
    """`kvcalc ...` lines of the plain ```bash blocks (usage examples without shown output)."""
    import re

    for path in doc_files(ROOT):
        if not path.exists():
            continue
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("kvcalc "):
                    yield path.name, line


def test_every_usage_example_runs():

    from docs_sync import run_kvcalc

    commands = list(_shown_commands())
    assert commands
    for name, line in commands:
        code, output = run_kvcalc(line[len("kvcalc "):])
        assert code == 0, f"{name}: `{line}` exited {code}: {output[-500:]}"
