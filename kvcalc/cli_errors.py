"""How every kvcalc command ends on bad input: one line `error: ...` on stderr and exit code 2, never a traceback
and never click's four-line usage block. The click settings the command groups share live here too."""

from __future__ import annotations

import sys

import click

from .errors import UsageError
from .gate import GATE_FAILED, GateFailed

# The click settings every kvcalc command group shares (kvcalc, and kvcalc validate run on its own).
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 110}

MAX_MESSAGE = 400  # characters of one error line; longer ones keep their start and end


def one_line(message: str, limit: int = MAX_MESSAGE) -> str:
    """The message on one line: whitespace runs (newlines included) become one space, other control characters
    are escaped, and an over-long message keeps its start (what was wrong) and its end (the hint)."""
    text = " ".join(str(message).split())
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if len(text) > limit:
        head = limit * 2 // 3
        text = f"{text[:head]} ... {text[-(limit - head - 5):]}"
    return text


def fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(code)


def run_command(command: click.Command, argv: list[str] | None, prog_name: str) -> None:
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.exceptions.NoArgsIsHelpError as exc:  # a bare `kvcalc`: the help, which is what was asked
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except click.ClickException as exc:  # click's own usage errors: unknown options, bad choices, missing values
        fail(exc.format_message(), exc.exit_code)
    except UsageError as exc:
        fail(str(exc))
    except GateFailed as exc:  # the command answered (its output is printed) and the answer is no: kvcalc/gate.py
        click.echo(f"gate failed: {one_line(str(exc))}", err=True)
        sys.exit(GATE_FAILED)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
