"""Reading a pasted server command line (`--vllm-command`, `--sglang-command`): the shell split and the flag loop the
two share. Each engine's module (vllm_command.py, sglang_command.py) keeps its own flag table, value kinds and
entry points; this module only walks `--flag value`, `--flag=value` and switches the same way for both.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from .errors import UsageError, shown

MAX_COMMAND = 16_384  # characters: a pasted command line, not a file


def split_command(text: str, option: str) -> list[str]:
    """The words of a pasted command line as a shell would split it (line continuations joined)."""
    if len(text) > MAX_COMMAND:
        raise UsageError(f"{option} is longer than {MAX_COMMAND:,} characters")
    try:
        return shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:
        raise UsageError(f"{option} cannot be split as a shell would: {exc}") from None


def read_flags(args: list[str], start: int, option: str, flags: dict[str, tuple[str, str]], ignored: set[str],
               switches: set[str], no_value_kinds: tuple[str, ...], is_value: Callable[[str], bool],
               store: Callable[[str, str, str, str | None], None], warnings: list[str],
               special: Callable[[str, str, str, int], int | None] | None = None) -> None:
    """Walk args[start:]: each known flag's value (the `=value` part, else the next word when is_value says it is
    one) goes to store(name, kind, flag, value); flags of a kind in no_value_kinds take none. A flag kvcalc does
    not know is skipped (its value too, unless it is one of `switches`) with a warning, unless it is in `ignored`;
    a word that is no flag is warned about. special(flag, eq, inline, i) may consume a flag itself and return the
    next index (None: not special)."""
    i = start
    while i < len(args):
        word = args[i]
        flag, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        i += 1
        if not flag.startswith("-"):
            warnings.append(f"{option}: stray argument {shown(word)} ignored")
            continue
        if special is not None:
            after = special(flag, eq, inline, i)
            if after is not None:
                i = after
                continue
        known = flags.get(flag)
        takes_value = (known is not None and known[1] not in no_value_kinds) or (known is None and flag not in switches)
        value = inline if eq else None
        if takes_value and value is None:
            if i < len(args) and is_value(args[i]):
                value, i = args[i], i + 1
            elif known is not None:
                raise UsageError(f"{option}: {flag} needs a value")
        if known is None:
            if flag not in ignored:
                warnings.append(f"{option}: {flag} is not modelled by kvcalc; ignored")
            continue
        name, kind = known
        store(name, kind, flag, value)
