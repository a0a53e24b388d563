"""`max_in_flight` per catalog profile: validated, carried by the plan into the state's model
record, read by the router's admission; a change is the routers' alone (no replica replaced)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from llmgw.planner import make_plan
from llmgw.router.admission import Admission, replica_slots
from llmgw.router.engine_keys import EngineKeys
from llmgw.router.settings import RouterSettings
from llmgw.router.slots import SlotCounts
from llmgw.router.table import RoutingTable
from llmgw.state import State
from tests.support.plan_inputs import cpu_profile, facts, gpu_profile, host, inputs, model

HOSTS = [host("a", address="10.0.0.1"), host("b", address="10.0.0.2")]
FACTS = [facts("a", 4), facts("b", 4)]


@pytest.mark.parametrize("bad", [0, -1, 65537, True, 2.5, "many"])
def test_max_in_flight_must_be_a_whole_number_from_1_to_65536(bad: object) -> None:
    with pytest.raises(ValidationError) as err:
        model("m", cpu_profile(max_in_flight=bad))
    assert "max_in_flight" in str(err.value)


def test_the_plan_records_each_profiles_target_and_a_change_replaces_nothing() -> None:
    first = make_plan(inputs([model("m", gpu_profile(gpus=4, max_in_flight=6), cpu_profile(), min=2)],
                             HOSTS, FACTS))
    state = first.applied(State(lineage="test"))
    assert state.models[0].max_in_flight == {"gpu": 6}  # the cpu profile sets none: the router's default
    changed = make_plan(inputs([model("m", gpu_profile(gpus=4, max_in_flight=12), cpu_profile(), min=2)],
                               HOSTS, FACTS, state=state))
    assert [(a.action, a.code) for a in changed.actions] == [("update", "model_changed")]
    assert "max_in_flight {'gpu': 6} -> {'gpu': 12}" in changed.actions[0].reason
    assert changed.applied(state).models[0].max_in_flight == {"gpu": 12}
    # Its replicas are the same ones, with the same definition.
    assert [(r.id, r.spec_hash) for r in changed.applied(state).replicas] == \
        [(r.id, r.spec_hash) for r in state.replicas]


def test_the_routers_admission_takes_the_profiles_target_first(tmp_path: Path) -> None:
    plan = make_plan(inputs([model("m", gpu_profile(gpus=4, max_in_flight=6), min=2)], HOSTS, FACTS))
    state = plan.applied(State(lineage="test"))
    state = state.model_copy(update={"replicas": [r.model_copy(update={"state": "ready"}) for r in state.replicas]})
    table = RoutingTable(state)
    entry = table.models["m"]
    counts = SlotCounts(RouterSettings(), lambda: table, EngineKeys(tmp_path / "engine-keys.json"))
    r = entry.replicas[0]
    counts.known[r.id] = (r.endpoint, 2)  # what the engine says: the profile's target wins
    assert replica_slots(r, RouterSettings(max_in_flight=3), counts, entry.record) == 6
    assert replica_slots(r, RouterSettings(max_in_flight=3), counts, None) == 3
    admission = Admission(RouterSettings(), lambda: table, slots=counts)
    assert admission.capacity("m") == 12  # two replicas of six
