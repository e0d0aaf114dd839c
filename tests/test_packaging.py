"""The wheel an index release would upload (issue 24): built offline from the tracked files, it holds every data file
the package reads, declares the console script, and answers README's first command from the unpacked wheel alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file() and not name.startswith(("tests/", "docs/validation/data/")):
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp / "dist")], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"pip could not build a wheel offline here: {done.stderr[-300:]}")
    return next((tmp / "dist").glob("kvcalc-*.whl"))


def test_the_wheel_holds_every_file_the_package_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "kvcalc"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    missing = [n for n in tracked if n not in names]
    assert not missing, missing
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Name: kvcalc" in text and "Requires-Dist: pydantic" in text and "# kvcalc" in text  # README as the page
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "kvcalc = kvcalc.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_unpacked_wheel_answers_the_readme_command(wheel, tmp_path):
    zipfile.ZipFile(wheel).extractall(tmp_path)
    done = subprocess.run([sys.executable, "-m", "kvcalc", "plan", "--gpu", "t4", "--context", "32k"],
                          cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path),
                          "COLUMNS": "150", "PATH": "/usr/bin", "KVCALC_CONFIG_DIR": os.environ["KVCALC_CONFIG_DIR"]})
    assert done.returncode == 0, done.stderr
    assert "Tesla T4" in done.stdout and "32,768 tokens" in done.stdout
