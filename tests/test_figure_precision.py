"""The figures' data files are written at a stated precision (paper_figures.common:
SIGNIFICANT_DIGITS), so that a regeneration whose values differ only in the last bits
writes the same bytes."""

import csv
import json
import math
from pathlib import Path

import numpy as np

from paper_figures import DEFAULT_OUT, common
from paper_figures.common import SIGNIFICANT_DIGITS, rounded


def _significant_digits(text: str) -> int:
    mantissa = text.lower().lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) or 1


def test_rounded_keeps_twelve_significant_digits_and_is_idempotent():
    assert SIGNIFICANT_DIGITS == 12
    assert rounded(0.1 + 0.2) == 0.3 and repr(rounded(0.30000000000000004)) == "0.3"
    assert rounded(0.4998452698798289) == 0.49984526988
    assert rounded(-1.2345678901234567e-300) == -1.23456789012e-300
    assert rounded(123456789012345.0) == 123456789012000.0
    for x in np.random.default_rng(0).standard_normal(1000) * 10.0 ** np.arange(-150, 150, 0.3):
        r = rounded(float(x))
        assert rounded(r) == r and _significant_digits(repr(r)) <= SIGNIFICANT_DIGITS
        assert abs(r - x) <= 5e-12 * abs(x)


def test_values_that_differ_in_the_last_bits_are_written_as_the_same_bytes(tmp_path):
    values = [0.4998452698798289, 6.063808548783695, 1.2957256466771305e-07, 3.3e-05, 5613120.000000001]
    for k, ulps in enumerate((1, 3, 40)):
        rows = [dict(panel="a", series="s", x=v, y=np.float64(v)) for v in values]
        shifted = [dict(r, x=r["x"] * (1 + ulps * 2**-52), y=np.float64(r["y"]) * (1 - ulps * 2**-52))
                   for r in rows]
        assert [r["x"] for r in shifted] != values  # the inputs do differ
        common.write_csv(tmp_path / f"a{k}.csv", rows)
        common.write_csv(tmp_path / f"b{k}.csv", shifted)
        assert (tmp_path / f"a{k}.csv").read_bytes() == (tmp_path / f"b{k}.csv").read_bytes()
        plain = [json.dumps(common.to_plain(dict(meta=r))) for r in (rows, shifted)]
        assert plain[0] == plain[1]


def _floats_in_json(value):
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _floats_in_json(v)
    elif isinstance(value, list):
        for v in value:
            yield from _floats_in_json(v)


def test_every_committed_data_file_is_at_the_stated_precision():
    """A file written before the rule (full repr) fails here: regenerate or redraw it."""
    out = Path(DEFAULT_OUT)
    files = sorted(out.glob("*.csv")) + sorted(out.glob("*.json"))
    assert len(files) >= 20
    for path in files:
        if path.suffix == ".csv":
            with open(path, newline="") as f:
                cells = [c for row in csv.reader(f) for c in row]
            floats = []
            for c in cells:  # integers are written exactly; floats are checked
                try:
                    int(c)
                    continue
                except ValueError:
                    pass
                try:
                    floats.append((c, float(c)))
                except ValueError:
                    pass
            bad = [c for c, x in floats if math.isfinite(x) and _significant_digits(c) > SIGNIFICANT_DIGITS]
        else:
            bad = [repr(x) for x in _floats_in_json(json.loads(path.read_text())) if rounded(x) != x]
        assert not bad, f"{path.name}: {bad[:3]} has more than {SIGNIFICANT_DIGITS} significant digits"
