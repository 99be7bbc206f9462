"""The client names and routes a partitioned queue's partitions as the module does: every line
of testing/vectors/partitions.tsv (queue, width, id or group, partition, name, slot)."""

from __future__ import annotations

from pathlib import Path

from echomq.partitions import name, route
from echomq.slots import slot

VECTORS = Path(__file__).resolve().parents[3] / "testing" / "vectors" / "partitions.tsv"


def test_every_vector_routes_and_names_as_the_module_does() -> None:
    lines = [
        line.split("\t")
        for line in VECTORS.read_text().splitlines()
        if not line.startswith("#")
    ]
    assert len(lines) == 108
    for queue, width, key, index, named, at in lines:
        assert route(int(width), key) == int(index), (queue, width, key)
        got = name(queue, int(index), int(width))
        assert got == named, (queue, width, key)
        assert slot(named) == int(at)


def test_a_name_too_long_or_a_width_out_of_range_has_no_partition() -> None:
    assert name("q" * 113, 0, 2) is None
    assert name("q", 0, 0) is None
    assert name("q", 0, 1025) is None
    assert name("q", 3, 3) is None
