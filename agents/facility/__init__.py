"""Facility collectors: rack PDUs, CDUs, power meters and BMCs over Redfish, SNMP and Modbus.

`targets.build_collectors()` turns `[[facility.targets]]` into the facility agent's
poller; `redfish.read_node_power()` serves the node agent. See docs/facility.md.
Nothing here imports the backend.
"""
