"""Redfish targets: a CDU (`profile = "cdu"`), a rack PDU or power shelf (`"pdu"`), a BMC (`"bmc"`).

A BMC target in the facility agent feeds `meter:it_input` (category 3 IT power).
"""

from __future__ import annotations

from agents.facility.collector import DeviceReading, TargetCollector
from agents.facility.config import Target
from agents.facility.redfish import read_cdu, read_node_power, read_pdu
from agents.facility.redfish_client import RedfishClient

REDFISH_PROFILES = ("cdu", "pdu", "bmc")


class RedfishCollector(TargetCollector):
    protocol = "redfish"

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        if target.profile not in REDFISH_PROFILES:
            raise ValueError(
                f"facility target {target.name!r}: redfish profile must be one of "
                f"{', '.join(REDFISH_PROFILES)}"
            )
        self.client = RedfishClient(
            target.address,
            username=target.option("username"),
            password=target.secrets.get("password"),
            auth=target.option("auth", "basic"),
            verify_tls=bool(target.option("verify_tls", True)),
            ca_file=target.option("ca_file"),
            timeout_s=target.timeout_s,
        )

    def read(self) -> DeviceReading:
        device = self.target.option("device")
        if self.target.profile == "cdu":
            values, notes = read_cdu(self.client, device)
            return DeviceReading(values, notes, "redfish:ThermalEquipment/CDUs")
        if self.target.profile == "pdu":
            values, notes = read_pdu(self.client, device)
            return DeviceReading(values, notes, "redfish:PowerEquipment")
        node = read_node_power(self.client, device)
        paths = [p for p in (node.pop("power_path"), node.pop("thermal_path")) if p]
        notes = [] if paths else ["no power or thermal resource answered"]
        return DeviceReading(node, notes, "redfish:" + "+".join(paths))

    def close(self) -> None:
        self.client.close()
