import pytest

from kiln.render.hostlist import HostlistError, compress, expand


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([f"gpu{i:03d}" for i in range(1, 129)], "gpu[001-128]"),
        (["gpu001", "gpu002", "gpu004", "gpu100"], "gpu[001-002,004,100]"),
        (["n9", "n10", "n11"], "n[9-11]"),
        (["ctl"], "ctl"),
        (["gpu007"], "gpu007"),
        (["a1", "b", "a3", "a2"], "a[1-3],b"),
        (["leaf-r01", "leaf-r02", "leaf-r04"], "leaf-r[01-02,04]"),
        (["r1-n01", "r1-n02", "r2-n01"], "r1-n[01-02],r2-n01"),
        (["gpu001", "gpu001", "gpu002"], "gpu[001-002]"),
        ([], ""),
    ],
)
def test_compress(names, expected):
    assert compress(names) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
        ("gpu[1-2,5],ctl01", ["gpu1", "gpu2", "gpu5", "ctl01"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("rack[1-2]-ib", ["rack1-ib", "rack2-ib"]),
    ],
)
def test_expand(expression, expected):
    assert expand(expression) == expected


def test_round_trip_of_a_large_fleet():
    names = [f"gpu{i:05d}" for i in range(1, 12501) if i % 97]
    assert sorted(expand(compress(names))) == names


@pytest.mark.parametrize("bad", ["gpu[1-3", "gpu1-3]", "gpu[a-c]", "gpu[5-1]"])
def test_expand_refuses_malformed(bad):
    with pytest.raises(HostlistError):
        expand(bad)
