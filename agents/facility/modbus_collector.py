"""Modbus TCP targets: facility meters read with pymodbus by a register map."""

from __future__ import annotations

from pymodbus.client import ModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusException, ModbusIOException

from agents.facility.collector import DeviceReading, TargetCollector
from agents.facility.config import Target, TargetConfigError
from agents.facility.modbus_map import Block, RegisterMap, decode, load_map, plan_reads
from agents.facility.snmp_transport import split_address
from agents.facility.status import TargetError
from agents.facility.units import UnitMismatch, combine, to_unit, wanted_unit

# Modbus exception codes, as a meter's manual would name them.
EXCEPTION_NAMES = {
    1: "illegal function",
    2: "illegal data address (wrong register map for this meter?)",
    3: "illegal data value",
    4: "server device failure",
    5: "acknowledge",
    6: "server device busy",
    10: "gateway path unavailable",
    11: "gateway target device failed to respond",
}


class ModbusCollector(TargetCollector):
    protocol = "modbus"

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.register_map: RegisterMap = load_map(target.profile)
        if target.feeds.kind not in ("meter", "feed"):
            raise TargetConfigError(
                f"facility target {target.name!r}: a Modbus meter feeds meter: or feed:"
            )
        self.unit_id = int(target.option("unit_id", 1))
        host, port = split_address(target.address, default_port=502)
        self.client = ModbusTcpClient(host, port=port, timeout=target.timeout_s, retries=0)
        self.blocks = plan_reads(self.register_map)

    def read(self) -> DeviceReading:
        registers: dict[tuple[int, int], int] = {}
        for block in self.blocks:
            for offset, word in enumerate(self._read_block(block)):
                registers[(block.function, block.start + offset)] = word
        values: dict[str, float] = {}
        notes: list[str] = []
        for spec in self.register_map.metrics:
            numbers = []
            for address in spec.addresses:
                words = [registers[(spec.function, address + i)] for i in range(spec.width)]
                number = decode(words, spec.data_type, self.register_map.high_word_first)
                if number is not None:  # NaN is how meters say "not available"
                    numbers.append(number * spec.scale)
            if not numbers:
                continue
            try:
                values[spec.metric] = to_unit(
                    combine(spec.combine, numbers), spec.unit, wanted_unit(spec.metric)
                )
            except UnitMismatch as exc:
                notes.append(f"{spec.metric}: {exc}")
        return DeviceReading(values, notes, f"modbus:{self.register_map.name}")

    def close(self) -> None:
        self._disconnect()

    def _disconnect(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]

    def _read_block(self, block: Block) -> list[int]:
        if not self.client.connected and not self.client.connect():  # type: ignore[no-untyped-call]
            raise TargetError("unreachable", f"cannot connect to {self.target.address}")
        try:
            if block.function == 4:
                response = self.client.read_input_registers(
                    block.start, count=block.count, device_id=self.unit_id
                )
            else:
                response = self.client.read_holding_registers(
                    block.start, count=block.count, device_id=self.unit_id
                )
        except ConnectionException as exc:
            self._disconnect()
            raise TargetError("unreachable", str(exc)) from None
        except ModbusIOException:
            self._disconnect()  # a late answer must not be read as the next one
            raise TargetError(
                "timeout", f"no Modbus answer within {self.target.timeout_s:g}s"
            ) from None
        except ModbusException as exc:
            self._disconnect()
            raise TargetError("protocol_error", str(exc)) from None
        if response.isError():
            code = int(getattr(response, "exception_code", 0))
            name = EXCEPTION_NAMES.get(code, "unknown exception")
            raise TargetError(
                "device_error",
                f"exception {code} ({name}) reading FC{block.function} {block.start}+{block.count}",
            )
        words = list(response.registers)
        if len(words) != block.count:
            raise TargetError("bad_data", f"asked {block.count} registers, got {len(words)}")
        return words
