"""benchmarks.interleaved: several backends on one model in one process, blocks rotated."""

from __future__ import annotations

import pytest
from benchmarks import interleaved


def test_every_backend_gets_a_row_and_a_ratio_to_the_first(tmp_path):
    out = tmp_path / "ab.md"
    rc = interleaved.main(
        ["--model", "probe", "--backends", "eager,dynamo_eager", "--blocks", "3", "--calls", "2", "--warmup", "1",
         "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    text = out.read_text()
    assert "interleaved in one process" in text and "Machine class " in text
    rows = {
        r.split("|")[1].strip(): r.split("|")[2:-1] for r in text.splitlines() if r.startswith("| ") and "ms" not in r
    }
    assert set(rows) == {"eager", "dynamo_eager"}
    assert rows["eager"][2].strip() == "1.000"  # the reference against itself, block by block
    for cells in rows.values():
        median, fastest = float(cells[0]), float(cells[1])
        assert 0 < fastest <= median


def test_an_unknown_backend_names_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        interleaved.main(["--model", "probe", "--backends", "eager,fxvin"])
    err = capsys.readouterr().err
    assert "unknown ['fxvin']" in err and "valid: eager, dynamo_eager" in err


def test_blocks_rotate_the_order():
    seen: list[str] = []
    calls = {n: (lambda n=n: seen.append(n)) for n in ("a", "b", "c")}
    medians = interleaved._blocks(calls, blocks=3, per_block=1, context=lambda n: _Mark(seen, n))
    assert seen == [x for n in "abcbcacab" for x in (f"<{n}", n, f"{n}>")]  # one context per block
    assert {n: len(v) for n, v in medians.items()} == {"a": 3, "b": 3, "c": 3}


class _Mark:
    """A context that records entering and leaving around a backend's block."""

    def __init__(self, seen: list[str], name: str) -> None:
        self.seen, self.name = seen, name

    def __enter__(self) -> None:
        self.seen.append(f"<{self.name}")

    def __exit__(self, *exc: object) -> None:
        self.seen.append(f"{self.name}>")
