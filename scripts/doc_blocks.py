"""The generated blocks of the docs: a report script's text between its start and end markers."""

from __future__ import annotations


def block_text(doc: str, start: str, end: str) -> str | None:
    """The text a generated block holds now (None when the doc lacks its markers)."""
    if start not in doc:
        return None
    return doc.split(start, 1)[1].split(end, 1)[0].removeprefix("\n")


def stale_blocks(blocks) -> list[str]:
    """The generated blocks whose doc text differs from what their script renders now: `blocks` is a script's
    generated_blocks() list of (doc path, start marker, end marker, text)."""
    return [f"{path.name}: {start}" for path, start, end, text in blocks
            if block_text(path.read_text(), start, end) != text]


def write_blocks(blocks) -> None:
    """Each (doc path, start, end, text) of a script's generated_blocks() written into its doc, each doc read and
    written once."""
    docs: dict = {}
    for path, start, end, text in blocks:
        docs[path] = replace_block(docs.get(path) or path.read_text(), start, end, text)
    for path, doc in docs.items():
        path.write_text(doc)


def print_or_write(blocks, argv) -> None:
    """A report script's main: print its blocks, and with --write put them into their docs."""
    for _, _, _, text in blocks:
        print(text, end="" if text.endswith("\n") else "\n")
    if "--write" in argv:
        write_blocks(blocks)


def replace_block(doc: str, start: str, end: str, text: str) -> str:
    """`doc` with the text between `start` and `end` replaced by `text` (which ends with a newline); a doc without the
    markers gets the block appended."""
    block = f"{start}\n{text}{end}"
    if start in doc:
        head, rest = doc.split(start, 1)
        return head + block + rest.split(end, 1)[1]
    return doc.rstrip("\n") + "\n\n" + block + "\n"
