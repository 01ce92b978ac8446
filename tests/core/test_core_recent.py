"""RecentByIdentity: memo entries found by identity, newest first, bounded."""

from __future__ import annotations

from picocontext.recent import RecentByIdentity


def test_entries_are_found_by_identity_not_equality_and_the_oldest_goes() -> None:
    recent: RecentByIdentity[list[int], str] = RecentByIdentity(2)
    a, b, c = [1], [1], [2]
    recent.put(a, "a")
    assert recent.get(a) == "a" and recent.get(b) is None  # b == a, but not a
    recent.put(b, "b")
    assert recent.get(a) == "a"  # now the newest
    recent.put(c, "c")  # b, the least recently used, is dropped
    assert recent.get(b) is None and recent.get(a) == "a" and recent.get(c) == "c"
    recent.put(a, "a2")  # a key put again is replaced, not kept twice
    recent.put(b, "b")
    assert recent.get(a) == "a2" and recent.get(c) is None
