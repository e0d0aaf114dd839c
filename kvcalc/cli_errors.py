"""How every kvcalc command ends on bad input: one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys

import click

from .errors import UsageError

# The click settings every kvcalc command group shares (kvcalc, and kvcalc validate run on its own).
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


def run_command(command: click.Command, argv: list[str] | None, prog_name: str) -> None:
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except UsageError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
