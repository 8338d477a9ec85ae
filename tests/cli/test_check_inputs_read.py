"""`check` reads a file's text as ``Path.read_text(encoding="utf-8")`` does (universal newlines, the same
decoding error at the same offset, the same OSError), through ``os.read``."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainadmit.cli.inputs import read_bytes, read_text

CONTENTS = [
    b"",
    b"apiVersion: batch/v1\nkind: Job\n",
    b"a: 1\r\nb: |\r\n  two\r\n  lines\r\n",  # CRLF, inside a block scalar too
    b"a: 1\rb: 2\r",  # lone CRs
    b"a: 1\r\r\nb: 2\n\r",  # CR before CRLF, a trailing CR
    b"\xef\xbb\xbfa: 1\n",  # a BOM stays a character, as utf-8 (not utf-8-sig) reads it
    "name: caf\u00e9 \u2013 \U0001f680\n".encode(),
    b"x" * (3 << 20) + b"\r\n",  # more than one read
]


@pytest.mark.parametrize("raw", CONTENTS, ids=range(len(CONTENTS)))
def test_the_text_is_what_read_text_gives(tmp_path, raw):
    path = tmp_path / "m.yaml"
    path.write_bytes(raw)
    assert read_bytes(str(path)) == raw
    assert read_text(str(path)) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("raw", [b"a: \xff\n", b"ok: 1\n" * 1000 + b"\xc3(", b"\x00\x01\x80"])
def test_a_decoding_error_is_read_texts(tmp_path, raw):
    path = tmp_path / "bin"
    path.write_bytes(raw)
    with pytest.raises(UnicodeDecodeError) as theirs:
        path.read_text(encoding="utf-8")
    with pytest.raises(UnicodeDecodeError) as mine:
        read_text(str(path))
    assert (mine.value.start, mine.value.object[mine.value.start]) == \
        (theirs.value.start, theirs.value.object[theirs.value.start])


@pytest.mark.parametrize("make", ["missing", "directory"])
def test_an_unreadable_path_raises_opens_error(tmp_path, make):
    path = tmp_path / "x"
    if make == "directory":
        path.mkdir()
    with pytest.raises(OSError) as theirs:
        Path(path).read_text(encoding="utf-8")
    with pytest.raises(OSError) as mine:
        read_text(str(path))
    assert (type(mine.value), mine.value.strerror) == (type(theirs.value), theirs.value.strerror)
