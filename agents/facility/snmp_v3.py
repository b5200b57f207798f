"""SNMPv3 (USM) sessions on pysnmp's engine, run in the shared background loop."""

from __future__ import annotations

from typing import Any

from pysnmp.hlapi.v3arch import asyncio as hlapi
from pysnmp.proto.error import StatusInformation

from agents.facility import aio
from agents.facility.snmp_transport import Value, plain, split_address
from agents.facility.status import TargetError

AUTH_PROTOCOLS = {
    "none": hlapi.usmNoAuthProtocol,
    "MD5": hlapi.usmHMACMD5AuthProtocol,
    "SHA": hlapi.usmHMACSHAAuthProtocol,
    "SHA224": hlapi.usmHMAC128SHA224AuthProtocol,
    "SHA256": hlapi.usmHMAC192SHA256AuthProtocol,
    "SHA384": hlapi.usmHMAC256SHA384AuthProtocol,
    "SHA512": hlapi.usmHMAC384SHA512AuthProtocol,
}
PRIV_PROTOCOLS = {
    "none": hlapi.usmNoPrivProtocol,
    "DES": hlapi.usmDESPrivProtocol,
    "AES": hlapi.usmAesCfb128Protocol,
    "AES128": hlapi.usmAesCfb128Protocol,
    "AES192": hlapi.usmAesCfb192Protocol,
    "AES256": hlapi.usmAesCfb256Protocol,
}
# USM failures that mean "your user, keys or protocols are wrong".
_AUTH_FAILURES = (
    "WrongDigest",
    "UnknownUserName",
    "UnknownSecurityName",
    "AuthenticationError",
    "DecryptionError",
    "UnsupportedSecurityLevel",
    "UnknownEngineID",
)

_engine: Any = None


def _shared_engine() -> Any:
    global _engine
    if _engine is None:
        _engine = hlapi.SnmpEngine()
    return _engine


class V3Session:
    def __init__(
        self,
        address: str,
        *,
        username: str,
        auth_key: str | None,
        priv_key: str | None,
        auth_protocol: str = "SHA",
        priv_protocol: str = "AES",
        context: str = "",
        timeout_s: float = 2.0,
        retries: int = 1,
    ) -> None:
        if auth_protocol not in AUTH_PROTOCOLS or priv_protocol not in PRIV_PROTOCOLS:
            raise ValueError(
                f"SNMPv3 auth_protocol one of {', '.join(AUTH_PROTOCOLS)}, "
                f"priv_protocol one of {', '.join(PRIV_PROTOCOLS)}"
            )
        self._peer = split_address(address)
        self._user = hlapi.UsmUserData(
            username,
            authKey=auth_key if auth_protocol != "none" else None,
            privKey=priv_key if priv_protocol != "none" else None,
            authProtocol=AUTH_PROTOCOLS[auth_protocol],
            privProtocol=PRIV_PROTOCOLS[priv_protocol],
        )
        self._context = hlapi.ContextData(contextName=context)
        self._timeout_s = timeout_s
        self._retries = retries
        self._target: Any = None

    def get(self, oids: list[str]) -> dict[str, Value]:
        return self._run(self._get(oids))

    def walk(self, column: str, limit: int = 256) -> dict[str, Value]:
        return self._run(self._walk(column, limit))

    def close(self) -> None:
        self._target = None

    def _run(self, coro: Any) -> dict[str, Value]:
        budget = self._timeout_s * (self._retries + 1) + 2.0
        try:
            result: dict[str, Value] = aio.run(coro, budget)
        except TimeoutError:
            raise TargetError("timeout", f"no SNMPv3 answer within {budget:g}s") from None
        except StatusInformation as exc:
            raise _failure(exc.get("errorIndication")) from None
        return result

    async def _transport(self) -> Any:
        if self._target is None:
            self._target = await hlapi.UdpTransportTarget.create(
                self._peer, timeout=self._timeout_s, retries=self._retries
            )
        return self._target

    async def _get(self, oids: list[str]) -> dict[str, Value]:
        indication, status, index, var_binds = await hlapi.get_cmd(
            _shared_engine(),
            self._user,
            await self._transport(),
            self._context,
            *[hlapi.ObjectType(hlapi.ObjectIdentity(oid)) for oid in oids],
        )
        _raise_for(indication, status, index, oids)
        return {str(oid): plain(value) for oid, value in var_binds}

    async def _walk(self, column: str, limit: int) -> dict[str, Value]:
        rows: dict[str, Value] = {}
        async for indication, status, index, var_binds in hlapi.walk_cmd(
            _shared_engine(),
            self._user,
            await self._transport(),
            self._context,
            hlapi.ObjectType(hlapi.ObjectIdentity(column)),
            lexicographicMode=False,
            maxRows=limit,
        ):
            _raise_for(indication, status, index, [column])
            for oid, value in var_binds:
                rows[str(oid)[len(column) + 1 :]] = plain(value)
        return rows


def _raise_for(indication: Any, status: Any, index: Any, oids: list[str]) -> None:
    if indication:
        raise _failure(indication)
    if status:
        where = oids[int(index) - 1] if 0 < int(index) <= len(oids) else "the request"
        raise TargetError("device_error", f"agent answered {status.prettyPrint()} for {where}")


def _failure(indication: Any) -> TargetError:
    name = type(indication).__name__
    if name == "RequestTimedOut":
        return TargetError("timeout", "no SNMPv3 answer (address, or engine not reachable)")
    if name in _AUTH_FAILURES:
        return TargetError("auth_failed", f"SNMPv3 {name}: check user, keys and protocols")
    return TargetError("protocol_error", f"SNMPv3 {name}: {indication}")
