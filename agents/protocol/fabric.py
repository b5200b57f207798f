"""The `fabric` part: a node's InfiniBand and RoCE ports, their state and error counters.

One entry per port read, a full snapshot of that port each time it is sent:

    {"ts": …, "device": "mlx5_0", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp",
     "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand",
     "counters": {"link_downed": 0, "symbol_error": 3, …}}

`state`, `phys_state`, `rate` and `link_layer` are the kernel's words from
/sys/class/infiniband/<device>/ports/<port>/ (the number before the colon dropped); each is
optional, left out where the file is missing. `counters` holds the IBA PortCounters the port
supports; a counter it does not support is left out, never sent as 0. Checked field by field,
naming the path of a fault (`fabric[2].counters.link_downed`).

Sources: the kernel's sysfs ABI (https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband)
and the counters' widths in drivers/infiniband/core/sysfs.c (`PORT_PMA_ATTR`,
https://github.com/torvalds/linux/blob/master/drivers/infiniband/core/sysfs.c).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# The error counters read, with their width in bits. IBA error counters stop at their
# maximum (2^width - 1) instead of wrapping: a counter there is *saturated*, and a rise can
# no longer be seen in it. The 64-bit data counters are left out: traffic is not an error.
COUNTER_BITS: dict[str, int] = {
    "link_downed": 8,
    "link_error_recovery": 8,
    "symbol_error": 16,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}
COUNTERS = tuple(COUNTER_BITS)
# A driver may expose a counter wider than the IBA field (the extended PMA set): accepted up
# to 64 bits, judged saturated only at its IBA maximum.
MAX_COUNTER = 2**64 - 1
MAX_PORTS_PER_NODE = 64  # HCAs × ports on one node: far above the 8–16 of a GPU server
MAX_FABRIC_ENTRIES = MAX_PORTS_PER_NODE * 8  # a batch may carry a few reads of each port
MAX_PORT = 255  # IBA port numbers are 8 bits
MAX_TEXT = 64
DEVICE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")  # mlx5_0, irdma1, rxe_eth0

ENTRY_KEYS = frozenset(
    {"ts", "device", "port", "state", "phys_state", "rate", "link_layer", "counters"}
)
TEXT_KEYS = ("state", "phys_state", "rate", "link_layer")
# The port state a working link is in (sysfs `state`, IBA PortState).
ACTIVE = "ACTIVE"

Timestamp = Callable[[Any, str], float]
Refuse = Callable[[str, str], Exception]


def saturated(name: str, value: int) -> bool:
    """True when `value` is the counter's IBA maximum: it has stopped counting."""
    bits = COUNTER_BITS.get(name)
    return bits is not None and value >= 2**bits - 1


def check_fabric(
    value: Any, source_kind: str, timestamp: Timestamp, refuse: Refuse
) -> list[dict[str, Any]]:
    """The validated entries; `refuse(field, reason)` builds the error raised on a fault."""
    if source_kind != "node":
        raise refuse("fabric", "only a node source reports fabric ports")
    if type(value) is not list:
        raise refuse("fabric", "must be a list of per-port entries")
    if len(value) > MAX_FABRIC_ENTRIES:
        raise refuse("fabric", f"{len(value)} entries; at most {MAX_FABRIC_ENTRIES}")
    seen: dict[tuple[Any, ...], int] = {}
    ports: set[tuple[str, int]] = set()
    for i, entry in enumerate(value):
        where = f"fabric[{i}]"
        _entry(entry, where, timestamp, refuse)
        ports.add((entry["device"], entry["port"]))
        j = seen.setdefault((entry["device"], entry["port"], entry["ts"]), i)
        if j != i:
            raise refuse(where, f"fabric[{j}] and {where} describe the same port at one time")
    if len(ports) > MAX_PORTS_PER_NODE:
        raise refuse("fabric", f"{len(ports)} ports; a node has at most {MAX_PORTS_PER_NODE}")
    return value


def _entry(entry: Any, where: str, timestamp: Timestamp, refuse: Refuse) -> None:
    if type(entry) is not dict:
        raise refuse(where, "must be an object")
    for key in entry:
        if key not in ENTRY_KEYS:
            raise refuse(f"{where}.{key}", "unknown field")
    timestamp(entry.get("ts"), f"{where}.ts")
    device = entry.get("device")
    if type(device) is not str or not DEVICE_NAME.match(device):
        raise refuse(f"{where}.device", "required RDMA device name (letters, digits, _.:-)")
    port = entry.get("port")
    if type(port) is not int or not 0 <= port <= MAX_PORT:
        raise refuse(f"{where}.port", f"required port number 0..{MAX_PORT}")
    for key in TEXT_KEYS:
        if key in entry:
            _text(entry[key], f"{where}.{key}", refuse)
    counters = entry.get("counters")
    if type(counters) is not dict:
        raise refuse(f"{where}.counters", "required object (empty when none is supported)")
    for name, count in counters.items():
        if name not in COUNTER_BITS:
            raise refuse(f"{where}.counters.{name}", f"unknown counter; one of {list(COUNTERS)}")
        if type(count) is not int or not 0 <= count <= MAX_COUNTER:
            raise refuse(f"{where}.counters.{name}", f"must be an integer 0..{MAX_COUNTER}")


def _text(value: Any, where: str, refuse: Refuse) -> None:
    if type(value) is not str or not value or len(value) > MAX_TEXT:
        raise refuse(where, f"must be text of 1-{MAX_TEXT} characters")
    if not value.isprintable():
        raise refuse(where, "text must be printable")
