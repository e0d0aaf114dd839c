import pytest

from kvcalc.errors import UsageError
from kvcalc.units import GB, GiB, fmt_bytes, parse_bytes, parse_tokens


@pytest.mark.parametrize("text,expected", [("32k", 32768), ("8192", 8192), ("1.5k", 1536), ("1M", 1048576),
                                           ("128K", 131072), ("32,768", 32768), (4096, 4096)])
def test_parse_tokens(text, expected):
    assert parse_tokens(text) == expected


@pytest.mark.parametrize("text", ["32q", "-1k", "0", "", "k", "1.0001k", "abc", "0k", "3 2k"])
def test_parse_tokens_rejects(text):
    with pytest.raises(UsageError):
        parse_tokens(text)


def test_bytes_keep_gib_and_gb_apart():
    assert parse_bytes("16GiB") == 16 * GiB == 17179869184
    assert parse_bytes("80GB") == 80 * GB == 80_000_000_000
    assert parse_bytes("512") == 512
    assert fmt_bytes(GiB) == "1.00 GiB"
    assert fmt_bytes(1536) == "1.50 KiB"
    with pytest.raises(UsageError):
        parse_bytes("16 gigs")
