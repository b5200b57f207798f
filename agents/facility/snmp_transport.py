"""SNMP GET and walk over pysnmp: v2c through pysnmp's message API, v3 through its engine.

v2c uses pysnmp's protocol module (`pysnmp.proto.api`) over one blocking UDP socket
per target: a site polls hundreds of PDUs, and building messages directly costs
about a third of the CPU of the high-level API, which resolves every OID through
its MIB machinery. v3 needs USM (keys, engine discovery, time windows), so it
runs on pysnmp's `SnmpEngine` in the shared background asyncio loop.

Values come back as plain Python: int, float-able str, dotted OID str, or None
for noSuchObject / noSuchInstance / endOfMibView (absent, never 0).
"""

from __future__ import annotations

import itertools
import random
import socket
from typing import Any, Protocol

from pyasn1.codec.ber import decoder, encoder  # type: ignore[import-untyped]
from pyasn1.error import PyAsn1Error  # type: ignore[import-untyped]
from pyasn1.type import univ  # type: ignore[import-untyped]
from pysnmp.proto import api, rfc1902

from agents.facility.status import TargetError

Value = int | str | None
_V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
_MAX_OIDS_PER_GET = 20  # stay well under any agent's max var-binds and UDP size
_ERROR_NAMES = {1: "tooBig", 2: "noSuchName", 3: "badValue", 4: "readOnly", 5: "genErr"}


class SnmpSession(Protocol):
    def get(self, oids: list[str]) -> dict[str, Value]: ...
    def walk(self, column: str, limit: int = 256) -> dict[str, Value]: ...
    def close(self) -> None: ...


def plain(value: Any) -> Value:
    """An SNMP value as plain Python; the "no such ..." exceptions become None."""
    if isinstance(value, univ.Null):  # noSuchObject, noSuchInstance, endOfMibView
        return None
    if isinstance(value, rfc1902.IpAddress):
        return ".".join(str(b) for b in value.asOctets())
    if isinstance(value, univ.Integer):  # Integer32, Gauge32, Counter32/64, TimeTicks
        return int(value)
    if isinstance(value, univ.ObjectIdentifier):
        return ".".join(str(n) for n in value.asTuple())
    if isinstance(value, univ.OctetString):
        text: str = value.asOctets().decode("utf-8", errors="replace")
        return text.strip()
    return None


def split_address(address: str, default_port: int = 161) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, default_port
    return host, int(port)


class V2cSession:
    """SNMPv2c over a connected UDP socket; one request in flight at a time."""

    def __init__(
        self, address: str, community: str, timeout_s: float = 2.0, retries: int = 1
    ) -> None:
        self._peer = split_address(address)
        self._community = community
        self._timeout_s = timeout_s
        self._retries = retries
        self._request_ids = itertools.count(random.randrange(1, 1 << 30))
        self._socket: socket.socket | None = None

    def get(self, oids: list[str]) -> dict[str, Value]:
        found: dict[str, Value] = {}
        for start in range(0, len(oids), _MAX_OIDS_PER_GET):
            chunk = oids[start : start + _MAX_OIDS_PER_GET]
            found.update(self._exchange(_V2C.GetRequestPDU(), chunk))
        return found

    def walk(self, column: str, limit: int = 256) -> dict[str, Value]:
        """Rows of one table column, keyed by index suffix (`"1"`, `"11.2"`)."""
        rows: dict[str, Value] = {}
        cursor = column
        for _ in range(limit):
            [(oid, value)] = self._exchange(_V2C.GetNextRequestPDU(), [cursor]).items()
            if not oid.startswith(column + ".") or value is None:
                break
            rows[oid[len(column) + 1 :]] = value
            cursor = oid
        return rows

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def _exchange(self, pdu: Any, oids: list[str]) -> dict[str, Value]:
        request_id = next(self._request_ids) & 0x7FFFFFFF
        _V2C.apiPDU.set_defaults(pdu)
        _V2C.apiPDU.set_request_id(pdu, request_id)
        _V2C.apiPDU.set_varbinds(pdu, [(oid, _V2C.Null("")) for oid in oids])
        message = _V2C.Message()
        _V2C.apiMessage.set_defaults(message)
        _V2C.apiMessage.set_community(message, self._community)
        _V2C.apiMessage.set_pdu(message, pdu)
        wire = encoder.encode(message)
        for _attempt in range(self._retries + 1):
            response = self._send_and_wait(wire, request_id)
            if response is not None:
                return self._varbinds(response, oids)
        raise TargetError(
            "timeout", f"no SNMP answer within {self._timeout_s:g}s (wrong community?)"
        )

    def _send_and_wait(self, wire: bytes, request_id: int) -> Any:
        sock = self._connected()
        try:
            sock.send(wire)
            while True:  # skip late answers to earlier, timed-out requests
                data = sock.recv(65535)
                try:
                    message, _ = decoder.decode(data, asn1Spec=_V2C.Message())
                except PyAsn1Error:
                    raise TargetError("protocol_error", "undecodable SNMP answer") from None
                pdu = _V2C.apiMessage.get_pdu(message)
                if int(_V2C.apiPDU.get_request_id(pdu)) == request_id:
                    return pdu
        except TimeoutError:
            return None
        except ConnectionRefusedError:
            raise TargetError("unreachable", "nothing answers on that SNMP port") from None
        except OSError as exc:
            self.close()
            raise TargetError("unreachable", exc.strerror or str(exc)) from None

    def _varbinds(self, pdu: Any, oids: list[str]) -> dict[str, Value]:
        status = int(_V2C.apiPDU.get_error_status(pdu))
        if status:
            index = int(_V2C.apiPDU.get_error_index(pdu))
            where = oids[index - 1] if 0 < index <= len(oids) else "the request"
            name = _ERROR_NAMES.get(status, f"error {status}")
            raise TargetError("device_error", f"agent answered {name} for {where}")
        return {
            ".".join(str(n) for n in oid.asTuple()): plain(value)
            for oid, value in _V2C.apiPDU.get_varbinds(pdu)
        }

    def _connected(self) -> socket.socket:
        if self._socket is None:
            family = socket.AF_INET6 if ":" in self._peer[0] else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.settimeout(self._timeout_s)
            try:
                sock.connect(self._peer)
            except OSError as exc:
                sock.close()
                raise TargetError("unreachable", exc.strerror or str(exc)) from None
            self._socket = sock
        return self._socket
