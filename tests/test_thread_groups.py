"""Two threads, two process groups: collsched's own Gloo groups get names every member agrees
on (the caller's group's name and ranks), so concurrent first calls wire them to the right
partners; two threads on one group are refused. The full campaign (≥ 9 runs per layout and
mode) is benchmarks/thread_groups.py; CI runs one seeded run of each layout, every mode mixed."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _multiproc import TESTS_DIR  # noqa: E402
from collsched.comm.launch import run_local  # noqa: E402

TIMEOUT_S = 10.0


def _run(fn: str, *args, world: int = 4) -> list:
    return run_local(f"_thread_scenarios:{fn}", world, args, gpus_per_server=world, timeout_s=90,
                     extra_pythonpath=[TESTS_DIR], raise_on_failure=False)


@pytest.mark.parametrize("layout", ["same", "different"])
def test_two_threads_on_two_groups_match_torch(layout):
    # Each thread mixes eager, native and planned calls on its own group; each rank starts its
    # threads after delays of its own, so the ranks create collsched's groups in other orders.
    results = _run("two_threads", layout, ["all", "all"], 6, TIMEOUT_S, 3)
    assert all(isinstance(r, dict) for r in results), [str(r)[:500] for r in results]
    threads = [(r, name, t) for r, res in enumerate(results) for name, t in res.items()]
    assert len(threads) == (8 if layout == "same" else 6)  # "different": ranks 0 and 3 are in one group each
    for r, name, t in threads:
        assert t["error"] is None, f"rank {r} {name}: {t['error']}"
        assert t["wrong"] == 0, f"rank {r} {name}: {t['wrong']} outputs differ from torch's"
        assert t["elapsed"] < TIMEOUT_S, f"rank {r} {name} took {t['elapsed']:.1f} s"


@pytest.mark.parametrize("serial", [False, True], ids=["store_clones", "one_creation_at_a_time"])
def test_user_groups_keep_their_names_after_a_subgroup_call(serial):
    # Ranks 0 and 1 make collsched's groups over a subgroup, 2 and 3 do not; torch's next
    # new_group (every rank) must still get one name everywhere (collsched leaves torch's
    # group counter alone) and work, not wait for its timeout. `serial`: as on torch < 2.8.
    results = _run("user_group_after_subgroup_call", 6.0, serial)
    assert all(isinstance(r, dict) for r in results), [str(r)[:500] for r in results]
    for r, res in enumerate(results):
        assert res.get("sum") == 10.0, f"rank {r}: {res}"
        assert res["elapsed"] < 5.0


def test_two_threads_on_one_group_are_refused():
    results = _run("same_group_two_threads", TIMEOUT_S, world=2)
    assert all(isinstance(r, dict) for r in results), [str(r)[:500] for r in results]
    for res in results:
        assert "another thread of this process" in res["second"] and "one thread at a time" in res["second"]
        assert res["second_s"] < 1.0  # refused at once, not after a wait
        assert res["first_ok"]  # the call already inside is unaffected


def test_a_failed_creation_raises_again_at_once():
    results = _run("failed_creation_is_kept", 2.0, world=2)
    first, again = results[0]["first"], results[0]["again"]
    assert first and "creating the per-direction Gloo groups" in first and results[0]["first_s"] < 2.0 + 2.0
    assert again and "earlier; the group cannot be used" in again and results[0]["again_s"] < 0.5
