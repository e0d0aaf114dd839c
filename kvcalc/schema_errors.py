"""pydantic's validation errors as one line: the first bad field, what is wrong, the value given, and how many more.

pydantic's own str(ValidationError) is several lines with a URL per error, and a file with many bad fields made a
400-character line (fuzz review §1c). Works on the error dicts only: importing this does not import pydantic.
Shared by config_schema.py (config.json) and hardware/schema.py (GPU profile YAML).
"""

from __future__ import annotations

from typing import Any

from .errors import shown

# pydantic error types -> the words printed after the field name
_PLAIN = {
    "missing": "is missing",
    "extra_forbidden": "is not a known field (a typo?)",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "int_parsing": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "dict_type": "must be an {mapping}",
    "model_type": "must be an {mapping}",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
}
_COMPARE = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
            "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}


def describe(err: dict[str, Any], prefix: str = "", bounds_note: dict[Any, str] | None = None,
             mapping: str = "object") -> str:
    """One pydantic error as '<field> <what is wrong> (got <value>)'. bounds_note: text to add after an upper or lower
    bound that is the caller's own choice rather than a fact (e.g. kvcalc's cap on layers). mapping: what the file
    format calls a mapping ("object" in JSON, "mapping" in YAML)."""
    parts = [str(p) for p in err.get("loc", ())]
    loc = prefix + ".".join(parts)
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    given = err.get("input")
    if kind.endswith("_type") and "input" in err and given is None:
        text = "must be set (it is null)"
    elif kind in _PLAIN:
        text = _PLAIN[kind].format(mapping=mapping).replace("an mapping", "a mapping")
    elif kind in _COMPARE:
        op, key = _COMPARE[kind]
        bound = ctx.get(key)
        text = f"must be {op} {bound:,}" if isinstance(bound, int) else f"must be {op} {bound}"
        if bounds_note and bound in bounds_note:
            text += f" ({bounds_note[bound]})"
    elif kind == "literal_error":
        text = f"must be {ctx.get('expected')}"
    elif kind in ("string_too_long", "too_long"):
        text = f"is too long (at most {ctx.get('max_length')} {'characters' if kind == 'string_too_long' else 'items'})"
    elif kind == "string_too_short":
        text = "must not be empty"
    else:
        text = str(err.get("msg", "is invalid")).removeprefix("Value error, ")
        text = text[:1].lower() + text[1:] if parts else text
    if not parts:  # a rule across fields: its message names them
        return text
    if kind in ("missing", "extra_forbidden") or "input" not in err or given is None:
        return f"{loc} {text}"
    return f"{loc} {text} (got {shown(given, 30)})"


def summarize(exc: Any, prefix: str = "", bounds_note: dict[Any, str] | None = None, mapping: str = "object") -> str:
    """The first error of a pydantic ValidationError, and how many more: one line, whatever pydantic found."""
    errors = exc.errors(include_url=False)
    if not errors:
        return "invalid"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return describe(errors[0], prefix, bounds_note, mapping) + more
