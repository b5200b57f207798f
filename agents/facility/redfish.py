"""Redfish readers: BMC node power/thermal, CDUs (ThermalEquipment) and rack PDUs (PowerEquipment).

Each reader walks from the schema-mandated collection URIs, so it needs nothing
but a `get(path) -> dict | None` (None = 404). Readings come from the inline
`{Reading, DataSourceUri}` excerpts; when only the link is there the Sensor is
fetched, and a link that answers 404 is simply no reading (DMTF's own mockups
carry dozens of such dangling links). Values are in protocol units; what the
device says is wrong with itself (failed pump, tripped breaker, active
conditions) comes back as human notes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from agents.facility.units import UnitMismatch, as_number, to_unit

Json = dict[str, Any]
CHASSIS = "/redfish/v1/Chassis"
CDUS = "/redfish/v1/ThermalEquipment/CDUs"
POWER_EQUIPMENT = "/redfish/v1/PowerEquipment"

_HEALTH_LEVEL = {"OK": 0, "Warning": 1, "Critical": 2}


class RedfishGetter(Protocol):
    def get(self, path: str) -> Json | None: ...


# -- shared helpers ---------------------------------------------------------------------------


def link(document: Json | None, key: str) -> str | None:
    value = document.get(key) if document else None
    if isinstance(value, dict) and isinstance(value.get("@odata.id"), str):
        return str(value["@odata.id"])
    return None


def follow(client: RedfishGetter, document: Json | None, key: str) -> Json | None:
    """GET the resource `document[key]` links to; None if there is no link or it 404s."""
    uri = link(document, key)
    return client.get(uri) if uri else None


def members(client: RedfishGetter, collection_uri: str | None) -> list[str]:
    collection = client.get(collection_uri) if collection_uri else None
    found = collection.get("Members") if collection else None
    if not isinstance(found, list):
        return []
    return [m["@odata.id"] for m in found if isinstance(m, dict) and "@odata.id" in m]


def sensor_value(sensor: Json | None, unit: str) -> float | None:
    """A Sensor resource's Reading in `unit`; a missing ReadingUnits means the schema unit."""
    if not sensor:
        return None
    value = as_number(sensor.get("Reading"))
    if value is None:
        return None
    units = sensor.get("ReadingUnits")
    try:
        return to_unit(value, units if isinstance(units, str) else None, unit)
    except UnitMismatch:
        return None


def excerpt_value(client: RedfishGetter, excerpt: Any, unit: str) -> float | None:
    """`{"Reading": 30, "DataSourceUri": ...}` -> 30; follows the link only if Reading is absent."""
    if not isinstance(excerpt, dict):
        return None
    inline = as_number(excerpt.get("Reading"))
    if inline is not None:
        return inline  # an excerpt is in the unit its property name states
    uri = excerpt.get("DataSourceUri")
    if isinstance(uri, str):
        return sensor_value(client.get(uri), unit)
    return None


def condition_notes(status: Any) -> list[str]:
    """Active `Status.Conditions[]` worse than OK, as `Critical: Pump '2' has failed.`."""
    conditions = status.get("Conditions") if isinstance(status, dict) else None
    notes: list[str] = []
    for condition in conditions if isinstance(conditions, list) else []:
        if not isinstance(condition, dict):
            continue
        severity = condition.get("Severity")
        if severity in ("Warning", "Critical"):
            message = condition.get("Message") or condition.get("MessageId") or "condition"
            notes.append(f"{severity}: {message}")
    return notes


def _health(document: Json | None) -> str | None:
    status = document.get("Status") if document else None
    health = status.get("Health") if isinstance(status, dict) else None
    return health if isinstance(health, str) else None


def _state(document: Json | None) -> str | None:
    status = document.get("Status") if document else None
    state = status.get("State") if isinstance(status, dict) else None
    return state if isinstance(state, str) else None


def _put(values: dict[str, float], name: str, value: float | None) -> None:
    if value is not None:
        values[name] = value


# -- BMC: node power and thermal ----------------------------------------------------------------


def read_node_power(client: RedfishGetter, chassis_id: str | None = None) -> dict[str, Any]:
    """Node input power and inlet/outlet air from a BMC.

    Returns `power_w`, `temp_inlet_c`, `temp_outlet_c` (each only if read) and
    `power_path` / `thermal_path`: which schema answered (`EnvironmentMetrics`,
    `Sensors`, legacy `Power`; `ThermalSubsystem`, legacy `Thermal`), or "" if none.
    """
    chassis = _pick_chassis(client, chassis_id)
    result: dict[str, Any] = {"power_path": "", "thermal_path": ""}
    if chassis is None:
        return result
    power, result["power_path"] = _node_power(client, chassis)
    _put(result, "power_w", power)
    inlet, outlet, result["thermal_path"] = _node_air(client, chassis)
    _put(result, "temp_inlet_c", inlet)
    _put(result, "temp_outlet_c", outlet)
    return result


def _pick_chassis(client: RedfishGetter, chassis_id: str | None) -> Json | None:
    if chassis_id:
        return client.get(f"{CHASSIS}/{chassis_id}")
    for uri in members(client, CHASSIS):
        chassis = client.get(uri)  # HPE lists an enclosure that answers 404: skip it
        if chassis and any(
            link(chassis, key)
            for key in ("EnvironmentMetrics", "Power", "PowerSubsystem", "ThermalSubsystem")
        ):
            return chassis
    return None


def _node_power(client: RedfishGetter, chassis: Json) -> tuple[float | None, str]:
    metrics = follow(client, chassis, "EnvironmentMetrics")
    watts = excerpt_value(client, metrics.get("PowerWatts"), "W") if metrics else None
    if watts is not None:
        return watts, "EnvironmentMetrics"
    watts = _total_power_sensor(client, link(chassis, "Sensors"))
    if watts is not None:
        return watts, "Sensors"
    legacy = follow(client, chassis, "Power")
    controls = legacy.get("PowerControl") if legacy else None
    if isinstance(controls, list) and controls and isinstance(controls[0], dict):
        # PowerControl[0] is the chassis total; PSU entries must not be summed (HPE
        # reports the chassis total on every PSU).
        watts = as_number(controls[0].get("PowerConsumedWatts"))
        if watts is not None:
            return watts, "Power"
    return None, ""


def _total_power_sensor(client: RedfishGetter, sensors_uri: str | None) -> float | None:
    # Only sensors whose id names the chassis total are fetched: a BMC has dozens.
    for uri in members(client, sensors_uri):
        sensor_id = uri.rstrip("/").rsplit("/", 1)[-1].lower()
        if sensor_id not in ("totalpower", "power", "powerconsumption", "chassispower"):
            continue
        sensor = client.get(uri)
        if sensor and sensor.get("ReadingType") == "Power":
            return sensor_value(sensor, "W")
    return None


def _node_air(client: RedfishGetter, chassis: Json) -> tuple[float | None, float | None, str]:
    metrics = follow(client, follow(client, chassis, "ThermalSubsystem"), "ThermalMetrics")
    if metrics:
        summary = metrics.get("TemperatureSummaryCelsius")
        summary = summary if isinstance(summary, dict) else {}
        inlet = excerpt_value(client, summary.get("Intake"), "C")
        outlet = excerpt_value(client, summary.get("Exhaust"), "C")
        named = _named_readings(metrics.get("TemperatureReadingsCelsius"))
        inlet = inlet if inlet is not None else named.get("intake")
        outlet = outlet if outlet is not None else named.get("exhaust")
        if inlet is not None or outlet is not None:
            return inlet, outlet, "ThermalSubsystem"
    legacy = follow(client, chassis, "Thermal")
    if legacy:
        inlet, outlet = _legacy_air(legacy.get("Temperatures"))
        if inlet is not None or outlet is not None:
            return inlet, outlet, "Thermal"
    return None, None, ""


def _named_readings(readings: Any) -> dict[str, float]:
    found: dict[str, float] = {}
    for item in readings if isinstance(readings, list) else []:
        if isinstance(item, dict) and isinstance(item.get("DeviceName"), str):
            value = as_number(item.get("Reading"))
            if value is not None:
                found.setdefault(item["DeviceName"].lower(), value)
    return found


def _legacy_air(temperatures: Any) -> tuple[float | None, float | None]:
    """Inlet/exhaust from legacy `Thermal.Temperatures[]`.

    The name decides first (`01-Inlet Ambient`); PhysicalContext alone is trusted only
    when a single sensor carries it, because some BMCs (Gigabyte) label every
    sensor `Intake`, CPUs included.
    """
    rows = (
        [t for t in temperatures if isinstance(t, dict)] if isinstance(temperatures, list) else []
    )
    return (
        _air_sensor(rows, ("inlet", "intake"), "Intake"),
        _air_sensor(rows, ("exhaust", "outlet"), "Exhaust"),
    )


def _air_sensor(rows: list[Json], words: tuple[str, ...], context: str) -> float | None:
    def reading(row: Json) -> float | None:
        return as_number(row.get("ReadingCelsius"))

    for row in rows:
        name = str(row.get("Name", "")).lower()
        if any(word in name for word in words) and reading(row) is not None:
            return reading(row)
    in_context = [r for r in rows if r.get("PhysicalContext") == context and reading(r) is not None]
    return reading(in_context[0]) if len(in_context) == 1 else None


# -- CDU: ThermalEquipment/CDUs ------------------------------------------------------------------

_CONNECTOR_FIELDS = (
    ("SupplyTemperatureCelsius", "supply_c", "C"),
    ("ReturnTemperatureCelsius", "return_c", "C"),
    ("DeltaTemperatureCelsius", "delta_c", "C"),
    ("FlowLitersPerMinute", "flow_lpm", "L/min"),
    ("SupplyPressurekPa", "supply_kpa", "kPa"),
    ("ReturnPressurekPa", "return_kpa", "kPa"),
    ("DeltaPressurekPa", "dp_kpa", "kPa"),
    ("HeatRemovedkW", "heat_removed_kw", "kW"),
)
_PRIMARY_FIELDS = {"supply_c": "primary_supply_c", "return_c": "primary_return_c"}
_PRIMARY_FIELDS["flow_lpm"] = "primary_flow_lpm"


def read_cdu(
    client: RedfishGetter, cdu_id: str | None = None
) -> tuple[dict[str, float], list[str]]:
    """Loop metrics of one CDU (secondary = IT side) and the faults it reports."""
    uri = f"{CDUS}/{cdu_id}" if cdu_id else next(iter(members(client, CDUS)), None)
    cdu = client.get(uri) if uri else None
    if cdu is None:
        return {}, ["no CDU at ThermalEquipment/CDUs" + (f"/{cdu_id}" if cdu_id else "")]
    values: dict[str, float] = {}
    notes = condition_notes(cdu.get("Status"))
    secondary = _first_member(client, link(cdu, "SecondaryCoolantConnectors"))
    values.update(_connector(client, secondary))
    primary = _connector(client, _first_member(client, link(cdu, "PrimaryCoolantConnectors")))
    for name, primary_name in _PRIMARY_FIELDS.items():
        _put(values, primary_name, primary.get(name))
    values.update(_pumps(client, link(cdu, "Pumps"), notes))
    _put(values, "leak", _leak_level(follow(client, cdu, "LeakDetection")))
    _put(values, "reservoir_low", _reservoir_low(client, link(cdu, "Reservoirs"), notes))
    _filter_notes(client, link(cdu, "Filters"), notes)
    return values, _unique(notes)


def _first_member(client: RedfishGetter, collection_uri: str | None) -> Json | None:
    first = next(iter(members(client, collection_uri)), None)
    return client.get(first) if first else None


def _connector(client: RedfishGetter, connector: Json | None) -> dict[str, float]:
    values: dict[str, float] = {}
    if not connector:
        return values
    for prop, name, unit in _CONNECTOR_FIELDS:
        _put(values, name, excerpt_value(client, connector.get(prop), unit))
    if "delta_c" not in values and "supply_c" in values and "return_c" in values:
        values["delta_c"] = values["return_c"] - values["supply_c"]
    return values


def _pumps(client: RedfishGetter, pumps_uri: str | None, notes: list[str]) -> dict[str, float]:
    running: list[float | None] = []
    failed = 0
    uris = members(client, pumps_uri)
    for uri in uris:
        pump = client.get(uri)
        if pump is None or _state(pump) == "Absent":
            continue
        speed = excerpt_value(client, pump.get("PumpSpeedPercent"), "%")
        if _pump_failed(pump):
            failed += 1
            notes.append(f"pump {pump.get('Id', uri)} failed ({_health(pump)}, {_state(pump)})")
        elif _state(pump) == "Enabled" and (speed is None or speed > 0):
            running.append(speed)
    if not uris:
        return {}
    values: dict[str, float] = {"pumps_running": len(running), "pumps_failed": failed}
    speeds = [s for s in running if s is not None]
    if speeds:
        values["pump_speed_pct"] = sum(speeds) / len(speeds)
    elif not running:
        # Every pump stopped: the loop's pumps turn at 0 %, a reading like any other. Left
        # out, the field would stop arriving and read as a collector fault ("metric
        # stopped") in the middle of the very failure it describes.
        values["pump_speed_pct"] = 0.0
    return values


def _pump_failed(pump: Json) -> bool:
    status = pump.get("Status")
    conditions = status.get("Conditions") if isinstance(status, dict) else None
    failed_condition = any(
        isinstance(c, dict) and str(c.get("MessageId", "")).endswith("PumpFailed")
        for c in (conditions if isinstance(conditions, list) else [])
    )
    return failed_condition or _health(pump) == "Critical"


def _leak_level(leak: Json | None) -> float | None:
    """Worst detector: 0 OK, 1 Warning, 2 Critical; None when nothing is reported."""
    groups = leak.get("LeakDetectorGroups") if leak else None
    levels: list[int] = []
    for group in groups if isinstance(groups, list) else []:
        detectors = group.get("Detectors") if isinstance(group, dict) else None
        for detector in detectors if isinstance(detectors, list) else []:
            state = detector.get("DetectorState") if isinstance(detector, dict) else None
            if state in _HEALTH_LEVEL:
                levels.append(_HEALTH_LEVEL[state])
    return float(max(levels)) if levels else None


def _reservoir_low(client: RedfishGetter, uri: str | None, notes: list[str]) -> float | None:
    reservoirs = [client.get(m) for m in members(client, uri)]
    statuses = [str(r["FluidLevelStatus"]) for r in reservoirs if r and "FluidLevelStatus" in r]
    if not statuses:
        return None
    low = any(s != "OK" for s in statuses)
    if low:
        notes.append(f"reservoir fluid level {', '.join(statuses)}")
    return 1.0 if low else 0.0


def _filter_notes(client: RedfishGetter, uri: str | None, notes: list[str]) -> None:
    for member in members(client, uri):
        flt = client.get(member)
        if not flt:
            continue
        hours, rated = as_number(flt.get("ServiceHours")), as_number(flt.get("RatedServiceHours"))
        if hours is not None and rated and hours >= rated:
            notes.append(f"filter {flt.get('Id', member)} is due for service ({hours:g} h)")
        if _health(flt) in ("Warning", "Critical"):
            notes.append(f"filter {flt.get('Id', member)} health {_health(flt)}")


def _unique(notes: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(notes))


# -- rack PDU / power shelf: PowerEquipment ----------------------------------------------------


def read_pdu(
    client: RedfishGetter, device: str | None = None
) -> tuple[dict[str, float], list[str]]:
    """Feed metrics of one rack PDU or power shelf (`RackPDUs/1`, `PowerShelves/1`)."""
    uri = f"{POWER_EQUIPMENT}/{device}" if device else _first_power_device(client)
    pdu = client.get(uri) if uri else None
    if pdu is None:
        return {}, [f"no rack PDU or power shelf at PowerEquipment/{device or ''}"]
    notes = condition_notes(pdu.get("Status"))
    if _health(pdu) in ("Warning", "Critical"):
        notes.append(f"PDU health {_health(pdu)}")
    values: dict[str, float] = {}
    metrics = follow(client, pdu, "Metrics")
    if metrics:
        _put(values, "power_w", excerpt_value(client, metrics.get("PowerWatts"), "W"))
        _put(values, "energy_kwh", excerpt_value(client, metrics.get("EnergykWh"), "kWh"))
    mains = [client.get(m) for m in members(client, link(pdu, "Mains"))]
    _mains_values(client, [m for m in mains if m], values)
    for branch_uri in members(client, link(pdu, "Branches")):
        branch = client.get(branch_uri)
        if branch and branch.get("BreakerState") == "Tripped":
            notes.append(f"branch {branch.get('Id', branch_uri)} breaker tripped")
    return values, _unique(notes)


def _first_power_device(client: RedfishGetter) -> str | None:
    for collection in ("RackPDUs", "PowerShelves"):
        found = members(client, f"{POWER_EQUIPMENT}/{collection}")
        if found:
            return found[0]
    return None


def _mains_values(client: RedfishGetter, mains: list[Json], values: dict[str, float]) -> None:
    """Current of the most loaded line, mean line-to-neutral voltage, power if Metrics lacked it."""
    currents: list[float] = []
    volts: list[float] = []
    watts: list[float] = []
    for circuit in mains:
        currents += _poly(
            client, circuit.get("PolyPhaseCurrentAmps"), ("Line1", "Line2", "Line3"), "A"
        )
        phase_volts = _poly(
            client,
            circuit.get("PolyPhaseVoltage"),
            ("Line1ToNeutral", "Line2ToNeutral", "Line3ToNeutral"),
            "V",
        )
        single = excerpt_value(client, circuit.get("CurrentAmps"), "A")
        currents += [single] if single is not None else []
        voltage = excerpt_value(client, circuit.get("Voltage"), "V")
        volts += phase_volts or ([voltage] if voltage is not None else [])
        power = excerpt_value(client, circuit.get("PowerWatts"), "W")
        watts += [power] if power is not None else []
    if currents:
        values["current_a"] = max(currents)
    if volts:
        values["voltage_v"] = sum(volts) / len(volts)
    if "power_w" not in values and watts:
        values["power_w"] = sum(watts)


def _poly(client: RedfishGetter, block: Any, keys: tuple[str, ...], unit: str) -> list[float]:
    if not isinstance(block, dict):
        return []
    found = [excerpt_value(client, block.get(key), unit) for key in keys]
    return [v for v in found if v is not None]
