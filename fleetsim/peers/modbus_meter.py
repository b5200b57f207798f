"""A facility meter on loopback: a pymodbus TCP server holding a register map's registers.

`set(power_w=..., energy_kwh=...)` writes protocol-unit values into the registers
exactly as the real meter would hold them (kW and Wh for a PM5000, float words in
the map's order); `exception` makes every read answer that Modbus exception code.
"""

from __future__ import annotations

from typing import Any

from pymodbus.constants import ExcCodes
from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import SimData, SimDevice
from pymodbus.simulator.simutils import DataType

from agents.facility.modbus_map import RegisterSpec, encode, load_map, plan_reads
from agents.facility.units import to_unit, wanted_unit


class ModbusMeter:
    def __init__(self, map_name: str, unit_id: int = 1) -> None:
        self.register_map = load_map(map_name)
        self.unit_id = unit_id
        self.exception: int | None = None  # e.g. 4 = server device failure
        self._image: dict[tuple[int, int], int] = {}
        self._server: ModbusTcpServer | None = None
        self.port = 0

    def set(self, **values: float) -> None:
        """Set metrics in protocol units (`power_w`, `energy_kwh`, `current_a`, `voltage_v`)."""
        specs = {spec.metric: spec for spec in self.register_map.metrics}
        for metric, value in values.items():
            spec = specs[metric]
            for address in spec.addresses:
                self._store(spec, address, value)

    def set_raw(self, function: int, address: int, words: list[int]) -> None:
        """Put arbitrary words (garbage tests)."""
        for offset, word in enumerate(words):
            self._image[(function, address + offset)] = word & 0xFFFF

    async def start(self) -> ModbusMeter:
        holding, inputs = self._blocks(3), self._blocks(4)
        device = SimDevice(
            id=self.unit_id,
            simdata=([_unused_bits()], [_unused_bits()], holding, inputs),
            action=self._on_access,
        )
        self._server = ModbusTcpServer(device, address=("127.0.0.1", 0))
        await self._server.serve_forever(background=True)
        transport: Any = self._server.transport
        self.port = int(transport.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.shutdown()  # type: ignore[no-untyped-call]
            self._server = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _store(self, spec: RegisterSpec, address: int, value: float) -> None:
        # Inverse of the collector: protocol unit -> the meter's unit -> raw words.
        per_unit = to_unit(1.0, spec.unit, wanted_unit(spec.metric)) * spec.scale
        words = encode(value / per_unit, spec.data_type, self.register_map.high_word_first)
        self.set_raw(spec.function, address, words)

    def _blocks(self, function: int) -> list[SimData]:
        # The collector's read blocks, so gaps inside them are valid registers as on a
        # real meter; addresses outside them answer "illegal data address".
        blocks = [b for b in plan_reads(self.register_map) if b.function == function]
        if not blocks:
            return [SimData(0, count=1, datatype=DataType.INVALID)]
        return [SimData(b.start, count=b.count, datatype=DataType.REGISTERS) for b in blocks]

    async def _on_access(
        self,
        function_code: int,
        start_address: int,
        address: int,
        count: int,
        registers: list[int],
        set_values: list[int] | list[bool] | None,
    ) -> ExcCodes | None:
        if self.exception is not None:
            return ExcCodes(self.exception)
        group = 3 if function_code in (3, 6, 16, 23) else function_code
        for offset in range(len(registers)):
            word = self._image.get((group, start_address + offset))
            if word is not None:
                registers[offset] = word
        return None


def _unused_bits() -> SimData:
    return SimData(0, count=1, datatype=DataType.BITS)
