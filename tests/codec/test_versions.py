import pytest

from offsets_codec.versions import MAX_VERSION, NONE, VersionRange


@pytest.mark.parametrize(
    "text, lowest, highest",
    [("0+", 0, MAX_VERSION), ("3+", 3, MAX_VERSION), ("0-2", 0, 2), ("1", 1, 1), ("none", 0, -1)],
)
def test_parse_gives_the_bounds_and_prints_back_the_same_text(text, lowest, highest):
    r = VersionRange.parse(text)
    assert (r.lowest, r.highest) == (lowest, highest)
    assert str(r) == text


@pytest.mark.parametrize("text", ["", "x", "-1", "3-1", "1+2", "0-99999"])
def test_parse_rejects_malformed_ranges(text):
    with pytest.raises(ValueError):
        VersionRange.parse(text)


def test_contains_checks_both_bounds():
    r = VersionRange.parse("1-3")
    assert [v for v in range(6) if v in r] == [1, 2, 3]
    assert 7 in VersionRange.parse("3+") and 2 not in VersionRange.parse("3+")
    assert 0 not in NONE


def test_intersect_and_subset():
    assert VersionRange.parse("0+").intersect(VersionRange.parse("2-4")) == VersionRange(2, 4)
    assert VersionRange.parse("0-1").intersect(VersionRange.parse("3+")).empty
    assert VersionRange.parse("4+").issubset(VersionRange.parse("0+"))
    assert not VersionRange.parse("0+").issubset(VersionRange.parse("0-4"))
    assert NONE.issubset(VersionRange.parse("1"))


def test_closed_ranges_iterate_and_open_ones_refuse():
    assert list(VersionRange.parse("0-2")) == [0, 1, 2]
    with pytest.raises(ValueError):
        list(VersionRange.parse("3+"))
