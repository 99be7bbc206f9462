"""The client names and routes a partitioned queue's partitions as the module does: every line
of testing/vectors/partitions.tsv (queue, width, id or group, partition, name, slot) and of
shares.tsv (width, index, first slot, the slot past the last). A name is found once and kept."""

from __future__ import annotations

from pathlib import Path

from echomq import routing, spans
from echomq.claiming import Claiming
from echomq.rounds import Claim
from echomq.partitions import MAX_NAME_LEN, _named, name, route, share
from echomq.slots import slot

VECTORS = Path(__file__).resolve().parents[3] / "testing" / "vectors"


def vectors(file: str) -> list[list[str]]:
    text = (VECTORS / file).read_text()
    return [line.split("\t") for line in text.splitlines() if not line.startswith("#")]


def test_every_vector_routes_and_names_as_the_module_does() -> None:
    lines = vectors("partitions.tsv")
    assert len(lines) == 108
    for queue, width, key, index, named, at in lines:
        assert route(int(width), key) == int(index), (queue, width, key)
        assert name(queue, int(index), int(width)) == named, (queue, width, key)
        assert slot(named) == int(at)


def test_every_share_is_the_module_s() -> None:
    lines = vectors("shares.tsv")
    assert len(lines) == 1142
    for width, index, low, high in lines:
        assert share(int(index), int(width)) == (int(low), int(high)), (width, index)


def test_a_name_that_is_no_queue_name_or_a_width_out_of_range_has_no_partition() -> None:
    longest = name("q" * MAX_NAME_LEN, 1023, 1024)
    assert longest is not None and len(longest) <= 128
    assert name("q" * (MAX_NAME_LEN + 1), 0, 2) is None
    assert name("a{b}c", 0, 2) is None
    assert name("", 0, 2) is None
    assert name("q", 0, 0) is None
    assert name("q", 0, 1025) is None
    assert name("q", 3, 3) is None


def test_a_queue_s_partition_names_are_found_once_and_kept() -> None:
    first = spans.names("kept-names", 1024)
    before = _named.cache_info()
    assert spans.names("kept-names", 1024) == first
    router = routing.Router("kept-names")
    router.learn(1024)
    assert router.partitions() == first
    assert router.of("some-group") == first[route(1024, "some-group")]
    after = _named.cache_info()
    assert after.misses == before.misses, "looked up, not found again"
    assert after.hits == before.hits + 2 * 1024 + 1
    # Kept by value: an index or width that is no int has none, whatever an int's is.
    assert name("q", 1, 4) is not None
    assert name("q", 1.0, 4) is None  # type: ignore[arg-type]
    assert name("q", True, 4) is None


def test_a_claim_of_one_primary_s_loop_among_several_holds_at_most_its_share() -> None:
    """A primary that stops answering under a claim keeps the slots the claim holds: one loop
    of several holds its share of the concurrency at most, so the others keep room."""
    worker = Claiming("q", 8, 30.0, None, 1.0, 1 / 3, 1.0, None, None)
    assert worker.wants(Claim("p", None), 1) == 8, "alone, the whole batch"
    assert worker.wants(Claim("p", None), 3) == 2, "one of three loops: 8 // 3"
    assert worker.wants(Claim("p", ["q"]), 3) == 1, "blocking: one slot"
    assert Claiming("q", 2, 30.0, None, 1.0, 1 / 3, 1.0, None, None).wants(Claim("p", None), 3) == 1
