"""benchmarks.interleaved: several backends on one model in one process, blocks rotated."""

from __future__ import annotations

import pytest
from benchmarks import interleaved


def test_every_backend_gets_a_row_and_a_ratio_to_the_first(tmp_path, capsys):
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


def test_an_unknown_backend_names_the_valid_ones():
    with pytest.raises(SystemExit):
        interleaved.main(["--model", "probe", "--backends", "eager,fxvin"])


def test_blocks_rotate_the_order():
    seen: list[str] = []
    calls = {n: (lambda n=n: seen.append(n)) for n in ("a", "b", "c")}
    medians = interleaved._blocks(calls, blocks=3, per_block=1)
    assert seen == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert {n: len(v) for n, v in medians.items()} == {"a": 3, "b": 3, "c": 3}
