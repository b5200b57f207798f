"""An SNMPv2c agent on loopback answering GET/GETNEXT from live values, built on pysnmp's
message API, shaped like an APC rPDU2 rack PDU by `set_apc_pdu()`.

The simulator runs one per virtual PDU (each on its own port, as each real PDU has
its own address) and updates the values every tick; tests use it for faults
snmpsim cannot play live (an agent that stops answering, values that change).
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

from pyasn1.codec.ber import decoder, encoder  # type: ignore[import-untyped]
from pyasn1.error import PyAsn1Error  # type: ignore[import-untyped]
from pysnmp.proto import api

_V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
APC = "1.3.6.1.4.1.318.1.1.26"
APC_SYS_OBJECT_ID = "1.3.6.1.4.1.318.1.3.4.6"  # AP8641, as in the recorded walk


def _key(oid: str) -> tuple[int, ...]:
    return tuple(int(part) for part in oid.split("."))


class SnmpAgent(asyncio.DatagramProtocol):
    def __init__(self, community: str = "public") -> None:
        self.community = community
        self.silent = False  # stop answering, like a PDU whose card hung
        self._values: dict[tuple[int, ...], Any] = {}
        self._order: list[tuple[int, ...]] = []
        self._transport: asyncio.DatagramTransport | None = None
        self.port = 0
        self.set("1.3.6.1.2.1.1.2.0", _V2C.ObjectIdentifier(APC_SYS_OBJECT_ID))

    def set(self, oid: str, value: Any) -> None:
        """Set one OID to an int, a str or a pysnmp value."""
        key = _key(oid)
        if key not in self._values:
            bisect.insort(self._order, key)
        if isinstance(value, bool):
            raise TypeError("SNMP has no booleans")
        if isinstance(value, int):
            value = _V2C.Integer(value)
        elif isinstance(value, str):
            value = _V2C.OctetString(value)
        self._values[key] = value

    def set_apc_pdu(
        self, *, power_w: float, energy_kwh: float, current_a: float, voltage_v: float
    ) -> None:
        """The rPDU2 device and phase rows a one-phase APC PDU serves, in APC's units."""
        load_state = 2  # normal; the simulator's faults may set 3/4 with set()
        self.set(f"{APC}.4.3.1.4.1", load_state)
        self.set(f"{APC}.4.3.1.5.1", round(power_w / 10))  # hundredths of kW
        self.set(f"{APC}.4.3.1.9.1", round(energy_kwh * 10))  # tenths of kWh
        self.set(f"{APC}.6.3.1.5.1", round(current_a * 10))  # tenths of A
        self.set(f"{APC}.6.3.1.6.1", round(voltage_v))

    async def start(self) -> SnmpAgent:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: self, local_addr=("127.0.0.1", 0)
        )
        self._transport = transport
        self.port = int(transport.get_extra_info("sockname")[1])
        return self

    async def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:  # type: ignore[override]
        if self.silent or self._transport is None:
            return
        try:
            message, _ = decoder.decode(data, asn1Spec=_V2C.Message())
        except PyAsn1Error:
            return  # not SNMPv2c: ignore, as an agent does
        if str(_V2C.apiMessage.get_community(message)) != self.community:
            return  # wrong community: silence, as real agents answer
        request = _V2C.apiMessage.get_pdu(message)
        response = _V2C.apiPDU.get_response(request)
        _V2C.apiPDU.set_varbinds(response, self._answer(request))
        _V2C.apiMessage.set_pdu(message, response)
        self._transport.sendto(encoder.encode(message), addr)

    def _answer(self, request: Any) -> list[tuple[Any, Any]]:
        next_mode = request.isSameTypeWith(_V2C.GetNextRequestPDU())
        answers = []
        for oid, _ in _V2C.apiPDU.get_varbinds(request):
            key = tuple(oid)
            if next_mode:
                position = bisect.bisect_right(self._order, key)
                if position < len(self._order):
                    found = self._order[position]
                    answers.append((_V2C.ObjectIdentifier(found), self._values[found]))
                else:
                    answers.append((oid, _V2C.EndOfMibView()))
            elif key in self._values:
                answers.append((oid, self._values[key]))
            else:
                answers.append((oid, _V2C.NoSuchInstance()))
        return answers
