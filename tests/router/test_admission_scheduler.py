"""The admission scheduler alone (scheduler.py): pure, on a virtual clock, every order exact.

A "service" here is a loop the tests drive: start what the scheduler starts, finish the
oldest running ticket with its real token count, repeat; the order tickets start in is
the order an engine would see them.
"""

from __future__ import annotations

from collections import Counter, deque

import pytest

from llmgw.router.scheduler import Scheduler, Ticket
from llmgw.store.model import Priority


def ticket(group: str, priority: Priority = "interactive", *, cost: float = 100, share: float = 1.0,
           at: float = 0.0) -> Ticket:
    return Ticket(group=group, priority=priority, cost=cost, share=share, arrived=at)


class Service:
    """`capacity` slots of model "m"; `run(n)` finishes n requests oldest-first, each costing
    its estimate (or `real[group]` tokens), and records the order they started in."""

    def __init__(self, sched: Scheduler, capacity: int) -> None:
        self.sched = sched
        self.capacity = capacity
        self.running: deque[Ticket] = deque()
        self.started: list[Ticket] = []
        self.now = 0.0

    def arrive(self, t: Ticket) -> Ticket:
        t.arrived = self.now
        self._took(self.sched.arrive("m", t, self.capacity, self.now))
        return t

    def _took(self, changed: list[Ticket]) -> None:
        for t in changed:
            if t.state == "running":
                self.running.append(t)
                self.started.append(t)

    def finish_one(self, tokens: int | None = None, *, step: float = 1.0) -> Ticket:
        self.now += step
        t = self.running.popleft()
        self._took(self.sched.finish("m", t, tokens if tokens is not None else int(t.cost), self.capacity, self.now))
        return t


def test_below_capacity_starts_at_once_and_above_it_waits_in_arrival_order() -> None:
    s = Service(Scheduler(max_queue=10), capacity=2)
    a, b, c, d = (s.arrive(ticket("g")) for _ in range(4))
    assert [a.state, b.state, c.state, d.state] == ["running", "running", "waiting", "waiting"]
    s.finish_one()
    assert (c.state, d.state) == ("running", "waiting")
    s.finish_one()
    assert d.state == "running"
    assert s.started == [a, b, c, d]


def test_a_light_group_is_served_next_however_many_a_heavy_group_has_queued() -> None:
    s = Service(Scheduler(max_queue=100), capacity=2)
    for _ in range(2 + 16):
        s.arrive(ticket("heavy"))
    light = s.arrive(ticket("light"))
    assert light.state == "waiting"
    s.finish_one()
    assert light.state == "running"  # the first free slot, ahead of 16 heavy waiters
    assert light.ahead == 0  # nobody started while it waited


def test_equal_shares_under_8x_load_split_served_tokens_evenly_and_keep_order_inside_a_group() -> None:
    """Heavy keeps 24 requests outstanding, light 3 (so it always has one waiting): equal
    shares means equal tokens served while both wait, whatever the 8x, and each group's
    requests start in the order they arrived."""
    s = Service(Scheduler(max_queue=100), capacity=2)
    heavy = [s.arrive(ticket("heavy")) for _ in range(24)]
    light = [s.arrive(ticket("light")) for _ in range(3)]
    for _ in range(200):
        done = s.finish_one()
        if done.group == "heavy":
            heavy.append(s.arrive(ticket("heavy")))
        else:
            light.append(s.arrive(ticket("light")))
    served = Counter(t.group for t in s.started[2:])  # after the two heavy ones that found the model idle
    assert abs(served["heavy"] - served["light"]) <= 2, served
    for group in (heavy, light):
        started = [t for t in s.started if t in group]
        assert started == [t for t in group if t.state != "waiting"]


def test_shares_weight_the_split_of_tokens() -> None:
    s = Service(Scheduler(max_queue=100), capacity=1)
    for _ in range(5):
        s.arrive(ticket("big", share=3.0))
        s.arrive(ticket("small", share=1.0))
    for _ in range(400):
        done = s.finish_one()
        s.arrive(ticket(done.group, share=3.0 if done.group == "big" else 1.0))
    served = Counter(t.group for t in s.started)
    assert served["big"] / served["small"] == pytest.approx(3.0, rel=0.05), served


def test_real_token_counts_correct_the_estimate() -> None:
    """Both groups estimate 100 a request, but `costly` really uses 300: it gets a third of
    the requests, so the tokens served come out even."""
    s = Service(Scheduler(max_queue=100), capacity=1)
    real = {"costly": 300, "cheap": 100}
    for _ in range(3):
        s.arrive(ticket("costly"))
        s.arrive(ticket("cheap"))
    for _ in range(400):
        t = s.running[0]
        s.finish_one(real[t.group])
        s.arrive(ticket(t.group))
    served = Counter(t.group for t in s.started)
    assert served["cheap"] / served["costly"] == pytest.approx(3.0, rel=0.05), served


def test_a_group_back_from_idle_gets_no_credit_for_the_time_it_sent_nothing() -> None:
    """`early` was served alone for a long time; `late` arriving then does not get the whole
    model until its counter catches up: it is lifted to the least counter waiting."""
    s = Service(Scheduler(max_queue=100), capacity=1)
    for _ in range(3):
        s.arrive(ticket("early"))
    for _ in range(50):
        s.finish_one()
        s.arrive(ticket("early"))
    for _ in range(3):
        s.arrive(ticket("late"))
    for _ in range(20):
        done = s.finish_one()
        s.arrive(ticket(done.group))
    served = Counter(t.group for t in s.started[-20:])
    assert abs(served["early"] - served["late"]) <= 2, served


def test_an_idle_group_starting_to_wait_ties_and_the_one_holding_fewer_slots_goes_first() -> None:
    s = Service(Scheduler(max_queue=100), capacity=2)
    for _ in range(4):
        s.arrive(ticket("heavy"))
    light = s.arrive(ticket("light"))  # lifted to heavy's counter: a tie, but heavy holds both slots
    s.finish_one()
    assert light.state == "running"


def test_priority_classes_are_served_strictly_in_order() -> None:
    s = Service(Scheduler(max_queue=100), capacity=1)
    s.arrive(ticket("a", "background"))  # runs: the model was idle
    queued = [s.arrive(ticket("a", p)) for p in ("background", "batch", "interactive", "batch", "interactive")]
    for _ in queued:
        s.finish_one()
    assert [t.priority for t in s.started[1:]] == ["interactive", "interactive", "batch", "batch", "background"]


def test_an_interactive_request_waits_for_at_most_one_batch_request() -> None:
    s = Service(Scheduler(max_queue=100), capacity=1)
    for _ in range(6):
        s.arrive(ticket("bulk", "batch"))
    s.finish_one()
    inter = s.arrive(ticket("user"))
    s.finish_one()  # the one batch request already running when it came
    assert inter.state == "running" and inter.ahead == 0
    s.finish_one()
    assert s.started[-1].ahead == 2  # the next batch request waited while two started (one of them `inter`)


def test_the_starvation_bound_lets_a_lower_class_through_after_waiting_long_enough() -> None:
    s = Service(Scheduler(max_queue=100, starve_after=5.0), capacity=1)
    s.arrive(ticket("u"))
    low = s.arrive(ticket("bulk", "background"))
    for _ in range(4):  # a steady interactive load: one more arrives per request served
        s.arrive(ticket("u"))
        s.finish_one(step=1.0)
        assert low.state == "waiting"
    s.arrive(ticket("u"))
    s.finish_one(step=1.0)  # now 5 s old
    assert low.state == "running"


def test_without_a_starvation_bound_the_lower_class_waits_while_higher_ones_queue() -> None:
    s = Service(Scheduler(max_queue=100), capacity=1)
    s.arrive(ticket("u"))
    low = s.arrive(ticket("bulk", "background"))
    for _ in range(50):
        s.arrive(ticket("u"))
        s.finish_one(step=10.0)
    assert low.state == "waiting"


def test_a_full_queue_sheds_the_newest_of_the_lowest_class_first() -> None:
    sched = Scheduler(max_queue=3)
    s = Service(sched, capacity=1)
    s.arrive(ticket("u"))
    old_bg, new_bg, batch = s.arrive(ticket("b", "background")), s.arrive(ticket("b", "background")), \
        s.arrive(ticket("b", "batch"))
    newcomer = ticket("u")
    changed = sched.arrive("m", newcomer, 1, 0.0)
    assert changed == [new_bg] and new_bg.state == "shed"
    assert (old_bg.state, batch.state, newcomer.state) == ("waiting", "waiting", "waiting")


def test_a_full_queue_refuses_a_newcomer_no_lower_than_everyone_waiting() -> None:
    sched = Scheduler(max_queue=2)
    s = Service(sched, capacity=1)
    s.arrive(ticket("u", "batch"))
    waiting = [s.arrive(ticket("u", "batch")) for _ in range(2)]
    for p in ("batch", "background"):
        late = ticket("v", p)  # type: ignore[arg-type]
        assert sched.arrive("m", late, 1, 0.0) == [late] and late.state == "shed"
    assert all(t.state == "waiting" for t in waiting)


def test_a_waiter_that_leaves_gives_up_its_place_and_a_running_one_its_slot() -> None:
    sched = Scheduler(max_queue=10)
    s = Service(sched, capacity=1)
    first = s.arrive(ticket("g"))
    gone, next_one = s.arrive(ticket("g")), s.arrive(ticket("g"))
    assert sched.finish("m", gone, None, 1, 0.0) == []  # left the queue: nothing starts
    assert gone.state == "done" and sched.queue("m").queued == 1
    assert sched.finish("m", first, None, 1, 0.0) == [next_one]


def test_no_capacity_known_admits_everything_and_an_idle_model_is_forgotten() -> None:
    sched = Scheduler(max_queue=1)
    tickets = [ticket("g") for _ in range(5)]
    for t in tickets:
        assert sched.arrive("m", t, 0, 0.0) == [t] and t.state == "running"
    for t in tickets:
        sched.finish("m", t, 10, 0, 0.0)
    assert "m" not in sched.models


def test_more_capacity_starts_waiters_on_a_pump() -> None:
    sched = Scheduler(max_queue=10)
    running = ticket("g")
    sched.arrive("m", running, 1, 0.0)
    waiting = [ticket("g") for _ in range(3)]
    for t in waiting:
        sched.arrive("m", t, 1, 0.0)
    assert sched.pump("m", 3, 1.0) == waiting[:2]
    assert sched.lengths()[("m", "interactive")] == 1


def test_headroom_keeps_the_last_free_slot_for_a_group_holding_none() -> None:
    """`headroom=1`: a heavy group fills all but one slot; a light group's request then starts
    at once, without waiting out a running request; nothing is stuck when only one group sends."""
    s = Service(Scheduler(max_queue=100, headroom=1), capacity=3)
    heavy = [s.arrive(ticket("heavy")) for _ in range(6)]
    # The first two take free slots; the third would take the last one: it waits.
    assert [t.state for t in heavy] == ["running", "running", "waiting", "waiting", "waiting", "waiting"]
    light = s.arrive(ticket("light"))
    assert light.state == "running" and light.ahead == 0  # the free slot was there: no wait
    s.finish_one()  # heavy[0] ends: one slot free, the heavy group holds one: it stays free
    assert heavy[2].state == "waiting"
    s.finish_one()  # heavy[1] ends: the heavy group holds none, two free: it takes one, not two
    assert [t.state for t in heavy[2:4]] == ["running", "waiting"]
    while s.running:
        s.finish_one()
    assert all(t.state == "done" for t in heavy)  # only the heavy group left: served to the end
    assert s.started.index(light) == 2


def test_headroom_never_goes_to_a_lower_class_while_a_higher_one_waits() -> None:
    s = Service(Scheduler(max_queue=100, headroom=1), capacity=2)
    first = s.arrive(ticket("product"))
    waiting = s.arrive(ticket("product"))  # the last slot: product holds one, so it waits
    assert (first.state, waiting.state) == ("running", "waiting")
    bulk = s.arrive(ticket("nightly", "batch"))
    assert bulk.state == "waiting"  # holds none, but an interactive request waits ahead of its class
