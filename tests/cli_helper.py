"""Run the kvcalc CLI as its console script does (main), capturing exit code, stdout and stderr."""

import contextlib
import io

from kvcalc.cli import main


def invoke(args):
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code or 0
    return code, out.getvalue(), err.getvalue()
