"""core/newlines: the same count as bytes.count, with and without StringZilla, on any range."""

from __future__ import annotations

import random

import pytest

from ascend_doctor.core import newlines


def _buffers() -> list[bytes]:
    rng = random.Random(18)
    out = [b"", b"\n", b"x", b"\n" * (newlines.LONG + 3)]
    for size in (10, newlines.LONG - 1, newlines.LONG, newlines.LONG + 1, 3 * newlines.LONG + 7):
        out.append(bytes(rng.choice(b"ab\n\r\xff") for _ in range(size)))
    return out


@pytest.mark.parametrize("simd", [True, False], ids=["stringzilla", "bytes.count"])
def test_count_matches_bytes_count(simd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not simd:
        monkeypatch.setattr(newlines, "_simd", lambda: None)
    rng = random.Random(7)
    for data in _buffers():
        n = len(data)
        assert newlines.count(data) == data.count(b"\n")
        for _ in range(40):
            a, b = sorted(rng.randint(-5, n + 5) for _ in range(2))
            assert newlines.count(data, a, b) == data.count(b"\n", a, b), (n, a, b)
            assert newlines.count(data, a) == data.count(b"\n", a), (n, a)


def test_stringzilla_is_used_when_installed() -> None:
    pytest.importorskip("stringzilla")
    assert newlines._simd() is not None
