"""The simulator's site read back through the real collectors (what `make demo` will send)."""

from __future__ import annotations

import asyncio

import pytest

from agents.protocol.validate import validate_batch
from fleetsim.faults import FaultPlan, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import parse_inventory
from fleetsim.peers.sim_bridge import SimulatedSiteDevices
from tests.support.facility import NOW

INVENTORY = {
    "site": {"slug": "demo"},
    "loops": [{"name": "CDU-1", "capacity_kw": 300, "supply_limit_c": 32}],
    "racks": [
        {
            "name": "A01",
            "cooling": "direct_liquid",
            "loop": "CDU-1",
            "budget_kw": 130,
            "feeds": [{"name": "A", "available_kw": 71.9}, {"name": "B", "available_kw": 71.9}],
        },
        {"name": "B01", "cooling": "air", "budget_kw": 40, "feeds": [{"name": "A"}]},
    ],
    "nodes": [
        {"name": "gpu-a01-01", "rack": "A01", "gpus": [{"index": i} for i in range(8)]},
        {"name": "gpu-b01-01", "rack": "B01", "gpus": [{"index": i} for i in range(8)]},
    ],
}


def test_a_cdu_pump_fault_in_the_simulator_arrives_as_the_pumps_redfish_status():
    faults = FaultPlan([parse_fault("cdu-pump-fail:CDU-1,pumps=1")])
    model = SiteModel(parse_inventory(INVENTORY), faults, seed=1)
    for step in range(3):
        model.step(10.0, 10.0 * (step + 1), NOW)

    async def one_tick():
        devices = await SimulatedSiteDevices(model).start()
        try:
            return await devices.reading(NOW)
        finally:
            await devices.stop()

    reading = asyncio.run(one_tick())

    validate_batch({"protocol": 1, "source": "site:demo", "seq": 1, **reading.samples}, now=NOW)
    [loop] = reading.samples["loop"]
    racks = {row["rack"]: row for row in reading.samples["rack"]}
    [facility] = reading.samples["facility"]
    assert loop["pumps_failed"] == model.loops["CDU-1"].pumps_failed == 1
    assert loop["pumps_running"] == 2
    assert racks["A01"]["power_w"] == pytest.approx(model.racks["A01"].power_w, abs=20)
    assert "liquid_supply_c" in racks["A01"] and "liquid_supply_c" not in racks["B01"]
    assert facility["pue_category"] == 2
    assert facility["it_power_w"] == pytest.approx(model.it_power_w, abs=30)
    assert facility["total_power_w"] == pytest.approx(model.total_power_w, rel=1e-6)
