"""The generated blocks of the docs: a report script's text between its start and end markers."""

from __future__ import annotations


def replace_block(doc: str, start: str, end: str, text: str) -> str:
    """`doc` with the text between `start` and `end` replaced by `text` (which ends with a newline); a doc without the
    markers gets the block appended."""
    block = f"{start}\n{text}{end}"
    if start in doc:
        head, rest = doc.split(start, 1)
        return head + block + rest.split(end, 1)[1]
    return doc.rstrip("\n") + "\n\n" + block + "\n"
