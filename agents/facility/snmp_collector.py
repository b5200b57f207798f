"""SNMP targets: read a device family's profile in one GET per poll."""

from __future__ import annotations

from agents.facility.collector import DeviceReading, TargetCollector
from agents.facility.config import Target, TargetConfigError
from agents.facility.snmp_profile import MetricSpec, SnmpProfile, load_profile
from agents.facility.snmp_transport import SnmpSession, V2cSession, Value
from agents.facility.snmp_v3 import V3Session
from agents.facility.units import UnitMismatch, combine, to_unit, wanted_unit


def open_session(target: Target) -> SnmpSession:
    version = str(target.option("version", "2c"))
    if version == "2c":
        community = target.secrets.get("community") or target.option("community", "public")
        return V2cSession(target.address, str(community), timeout_s=target.timeout_s)
    if version == "3":
        username = target.option("username")
        if not username:
            raise TargetConfigError(f"facility target {target.name!r}: SNMPv3 needs `username`")
        return V3Session(
            target.address,
            username=str(username),
            auth_key=target.secrets.get("auth_key"),
            priv_key=target.secrets.get("priv_key"),
            auth_protocol=str(target.option("auth_protocol", "SHA")),
            priv_protocol=str(target.option("priv_protocol", "AES")),
            context=str(target.option("context", "")),
            timeout_s=target.timeout_s,
        )
    raise TargetConfigError(f"facility target {target.name!r}: SNMP version must be 2c or 3")


class SnmpCollector(TargetCollector):
    protocol = "snmp"

    def __init__(self, target: Target, session: SnmpSession | None = None) -> None:
        super().__init__(target)
        self.profile: SnmpProfile = load_profile(target.profile)
        if target.feeds.kind not in self.profile.feeds:
            raise TargetConfigError(
                f"facility target {target.name!r}: profile {target.profile} feeds "
                f"{' or '.join(self.profile.feeds)}, not {target.feeds.kind}"
            )
        self.device = str(target.option("device", self.profile.default_device))
        self.session = session or open_session(target)
        self._rows: dict[str, tuple[str, ...]] = {}  # metric -> resolved row indexes

    def read(self) -> DeviceReading:
        notes: list[str] = []
        plan = {spec.metric: self._oids(spec) for spec in self.profile.metrics}
        state_oids = [f"{s.column}.{self._index(s.index)}" for s in self.profile.states]
        wanted = [oid for oids in plan.values() for oid in oids] + state_oids
        answers = self.session.get(wanted) if wanted else {}
        values: dict[str, float] = {}
        for spec in self.profile.metrics:
            value = self._metric_value(spec, [answers.get(oid) for oid in plan[spec.metric]], notes)
            if value is not None:
                values[spec.metric] = value
        for state, oid in zip(self.profile.states, state_oids, strict=True):
            raw = answers.get(oid)
            if isinstance(raw, int) and raw in state.notes:
                notes.append(f"{state.label}: {state.notes[raw]}")
        return DeviceReading(values, notes, f"snmp:{self.profile.name}")

    def close(self) -> None:
        self.session.close()

    def _index(self, index: str) -> str:
        return index.replace("{device}", self.device)

    def _oids(self, spec: MetricSpec) -> list[str]:
        if spec.index_by is None:
            return [f"{spec.column}.{self._index(i)}" for i in spec.indexes]
        if spec.metric not in self._rows:
            # Rows found by their identity column are looked up once: tables do not
            # reorder while the device runs.
            column, identity = spec.index_by
            rows = self.session.walk(column)
            self._rows[spec.metric] = tuple(k for k, v in rows.items() if v == identity)
        return [f"{spec.column}.{row}" for row in self._rows[spec.metric]]

    def _metric_value(self, spec: MetricSpec, raws: list[Value], notes: list[str]) -> float | None:
        numbers: list[float] = []
        for raw in raws:
            if raw is None:
                continue  # noSuchObject / noSuchInstance: not there, not zero
            number = _as_number(raw)
            if number is None:
                notes.append(f"{spec.metric}: device answered {raw!r}, not a number")
                continue
            if int(number) == number and int(number) in self.profile.absent_values:
                continue  # the vendor's "not available" (APC: -1)
            numbers.append(number)
        if not numbers:
            return None
        combined = combine(spec.combine, numbers) * spec.scale
        try:
            return to_unit(combined, spec.unit, wanted_unit(spec.metric))
        except UnitMismatch as exc:
            notes.append(f"{spec.metric}: {exc}")
            return None


def _as_number(raw: Value) -> float | None:
    if isinstance(raw, int):
        return float(raw)
    try:
        return float(str(raw))
    except ValueError:
        return None
