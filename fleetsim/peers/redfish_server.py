"""A Redfish service on loopback, serving documents from memory.

Two ways to fill it:
- `RedfishTree.from_mockup(folder)` loads a DMTF mockup folder the way DMTF's
  Redfish-Mockup-Server serves it: `GET /redfish/v1/A/B` is `A/B/index.json`.
- `live_cdu_tree()` / `live_pdu_tree()` build a minimal DMTF-shaped CDU or rack PDU
  whose readings the simulator changes with `set_cdu()` / `set_pdu()` while it runs.

Serves HTTP/1.1 keep-alive, basic and session authentication when credentials are
set, and can be told to stall (`delay_s`) to test timeouts.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Json = dict[str, Any]
ROOT = "/redfish/v1"


class RedfishTree:
    """Documents by canonical path (`/redfish/v1/Chassis/1U`), guarded by a lock."""

    def __init__(self, documents: dict[str, Json] | None = None) -> None:
        self._documents = dict(documents or {})
        self._lock = threading.Lock()

    @classmethod
    def from_mockup(cls, folder: str | Path) -> RedfishTree:
        base = Path(folder)
        documents: dict[str, Json] = {}
        for index in base.rglob("index.json"):
            relative = index.parent.relative_to(base).as_posix()
            path = ROOT if relative == "." else f"{ROOT}/{relative}"
            documents[path] = json.loads(index.read_text(encoding="utf-8"))
        return cls(documents)

    def get(self, path: str) -> bytes | None:
        with self._lock:
            document = self._documents.get(path)
            return None if document is None else json.dumps(document).encode()

    def put(self, path: str, document: Json) -> None:
        with self._lock:
            self._documents[path] = document

    def update(self, path: str, changes: Json) -> None:
        """Merge `changes` into the document at `path` (one level of dicts deep)."""
        with self._lock:
            document = self._documents[path]
            for key, value in changes.items():
                if isinstance(value, dict) and isinstance(document.get(key), dict):
                    document[key].update(value)
                else:
                    document[key] = value

    def paths(self) -> list[str]:
        with self._lock:
            return sorted(self._documents)


class RedfishServer:
    """A threaded HTTP server for one `RedfishTree` on 127.0.0.1:<free port>."""

    def __init__(
        self,
        tree: RedfishTree,
        *,
        username: str | None = None,
        password: str | None = None,
        delay_s: float = 0.0,
        raw_bodies: dict[str, bytes] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.tree = tree
        self.username = username
        self.password = password
        self.delay_s = delay_s
        self.raw_bodies = dict(raw_bodies or {})  # path -> bytes served as-is (garbage tests)
        self.sessions: set[str] = set()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:  # a BMC-like HTTPS endpoint (tests of certificate checking)
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
            self.scheme = "https"
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> RedfishServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"redfish-peer-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # releases stalled handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def stalled(self) -> bool:
        """Wait `delay_s` before answering; True if the server is stopping meanwhile."""
        return self.delay_s > 0 and self._stop.wait(self.delay_s)

    def authorised(self, headers: Any) -> bool:
        if self.username is None:
            return True
        token = headers.get("X-Auth-Token")
        if token and token in self.sessions:
            return True
        basic = headers.get("Authorization", "")
        if basic.startswith("Basic "):
            pair = base64.b64decode(basic[6:]).decode(errors="replace")
            return pair == f"{self.username}:{self.password}"
        return False


def _handler_for(server: RedfishServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as BMCs do

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as two writes; without NODELAY, Nagle plus the
            # client's delayed ACK adds 40 ms to every keep-alive answer.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: tests and the demo would drown in access lines

        def do_GET(self) -> None:
            if server.stalled():
                return
            if not server.authorised(self.headers):
                self._send(401, {"error": {"code": "Base.1.0.InsufficientPrivilege"}})
                return
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            if path == "/redfish":
                self._send(200, {"v1": f"{ROOT}/"})
                return
            raw = server.raw_bodies.get(path)
            body = raw if raw is not None else server.tree.get(path)
            if body is None:
                self._send(404, {"error": {"code": "Base.1.0.ResourceMissingAtURI"}})
                return
            self._send_bytes(200, body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            payload = self.rfile.read(length)
            if self.path.rstrip("/") != f"{ROOT}/SessionService/Sessions":
                self._send(405, {})
                return
            try:
                login = json.loads(payload)
            except ValueError:
                self._send(400, {})
                return
            if (login.get("UserName"), login.get("Password")) != (server.username, server.password):
                self._send(401, {})
                return
            token = secrets.token_hex(16)
            server.sessions.add(token)
            uri = f"{ROOT}/SessionService/Sessions/{token[:8]}"
            self._send(201, {"Id": token[:8]}, {"X-Auth-Token": token, "Location": uri})

        def do_DELETE(self) -> None:
            token = self.headers.get("X-Auth-Token")
            server.sessions.discard(token or "")
            self._send(204 if token else 401, None)

        def _send(
            self, status: int, body: Json | None, extra: dict[str, str] | None = None
        ) -> None:
            self._send_bytes(status, b"" if body is None else json.dumps(body).encode(), extra)

        def _send_bytes(
            self, status: int, data: bytes, extra: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


# -- live trees for the simulator ---------------------------------------------------------------

_CDU = f"{ROOT}/ThermalEquipment/CDUs/1"


def _ref(path: str) -> Json:
    return {"@odata.id": path}


def _collection(paths: list[str]) -> Json:
    return {"Members": [_ref(p) for p in paths], "Members@odata.count": len(paths)}


def live_cdu_tree(name: str = "CDU", pumps: int = 2) -> RedfishTree:
    """A CDU in the DMTF `public-cooling-unit` shape, with healthy readings to start from."""
    tree = RedfishTree()
    pump_paths = [f"{_CDU}/Pumps/{n}" for n in range(1, pumps + 1)]
    tree.put(f"{ROOT}/ThermalEquipment/CDUs", _collection([_CDU]))
    tree.put(
        _CDU,
        {
            "@odata.type": "#CoolingUnit.v1_5_0.CoolingUnit",
            "Id": "1",
            "Name": name,
            "EquipmentType": "CDU",
            "Status": {"State": "Enabled", "Health": "OK", "Conditions": []},
            "PrimaryCoolantConnectors": _ref(f"{_CDU}/PrimaryCoolantConnectors"),
            "SecondaryCoolantConnectors": _ref(f"{_CDU}/SecondaryCoolantConnectors"),
            "Pumps": _ref(f"{_CDU}/Pumps"),
            "LeakDetection": _ref(f"{_CDU}/LeakDetection"),
        },
    )
    for side in ("Primary", "Secondary"):
        connector = f"{_CDU}/{side}CoolantConnectors/1"
        tree.put(f"{_CDU}/{side}CoolantConnectors", _collection([connector]))
        tree.put(connector, {"Id": "1", "Status": {"State": "Enabled", "Health": "OK"}})
    tree.put(f"{_CDU}/Pumps", _collection(pump_paths))
    for n, path in enumerate(pump_paths, start=1):
        tree.put(path, _pump_document(n, speed_pct=60.0, failed=False))
    tree.put(f"{_CDU}/LeakDetection", _leak_document("OK"))
    set_cdu(tree, supply_c=30.0, return_c=40.0, flow_lpm=400.0, dp_kpa=35.0)
    set_cdu(tree, primary_supply_c=24.0, primary_return_c=34.0, primary_flow_lpm=380.0)
    return tree


def _pump_document(number: int, speed_pct: float, failed: bool) -> Json:
    status: Json = {"State": "Enabled", "Health": "OK", "Conditions": []}
    if failed:
        status = {
            "State": "UnavailableOffline",
            "Health": "Critical",
            "Conditions": [
                {
                    "MessageId": "Environmental.1.2.PumpFailed",
                    "Message": f"Pump '{number}' has failed.",
                    "Severity": "Critical",
                    "MessageArgs": [str(number)],
                }
            ],
        }
    return {
        "@odata.type": "#Pump.v1_2_0.Pump",
        "Id": str(number),
        "Name": f"CDU Pump {number}",
        "PumpType": "Liquid",
        "Status": status,
        "PumpSpeedPercent": {"Reading": 0.0 if failed else speed_pct},
    }


def _leak_document(state: str) -> Json:
    detector = {"DeviceName": "Moisture Leak Detector", "DetectorState": state}
    return {"LeakDetectorGroups": [{"GroupName": "CDU", "Detectors": [detector]}]}


_CONNECTOR_PROPERTIES = {
    "supply_c": "SupplyTemperatureCelsius",
    "return_c": "ReturnTemperatureCelsius",
    "flow_lpm": "FlowLitersPerMinute",
    "dp_kpa": "DeltaPressurekPa",
    "heat_removed_kw": "HeatRemovedkW",
}


def set_cdu(tree: RedfishTree, **readings: float) -> None:
    """Set live readings: `supply_c`, `return_c`, `flow_lpm`, `dp_kpa`, `heat_removed_kw`,
    and `primary_` + any of those for the facility side."""
    for key, value in readings.items():
        side = "Primary" if key.startswith("primary_") else "Secondary"
        prop = _CONNECTOR_PROPERTIES[key.removeprefix("primary_")]
        tree.update(f"{_CDU}/{side}CoolantConnectors/1", {prop: {"Reading": round(value, 2)}})


def set_cdu_pump(tree: RedfishTree, number: int, *, failed: bool, speed_pct: float = 60.0) -> None:
    """Fail or restore one pump: its Status and the CDU's Conditions change, as on hardware."""
    tree.put(f"{_CDU}/Pumps/{number}", _pump_document(number, speed_pct, failed))
    _refresh_cdu_conditions(tree)


def set_cdu_failed_pumps(tree: RedfishTree, failed: int, speed_pct: float = 60.0) -> None:
    """Exactly `failed` pumps failed (the highest-numbered ones), the others running."""
    paths = [p for p in tree.paths() if p.startswith(f"{_CDU}/Pumps/")]
    total = len(paths)
    for number in range(1, total + 1):
        broken = number > total - failed
        tree.put(f"{_CDU}/Pumps/{number}", _pump_document(number, speed_pct, broken))
    _refresh_cdu_conditions(tree)


def _refresh_cdu_conditions(tree: RedfishTree) -> None:
    conditions: list[Json] = []
    for path in tree.paths():
        if path.startswith(f"{_CDU}/Pumps/"):
            pump = json.loads(tree.get(path) or b"{}")
            conditions += pump.get("Status", {}).get("Conditions", [])
    health = "Critical" if conditions else "OK"
    tree.update(_CDU, {"Status": {"Health": health, "Conditions": copy.deepcopy(conditions)}})


def set_cdu_leak(tree: RedfishTree, state: str) -> None:
    """`OK`, `Warning` or `Critical`."""
    tree.put(f"{_CDU}/LeakDetection", _leak_document(state))


_PDU = f"{ROOT}/PowerEquipment/RackPDUs/1"


def live_pdu_tree(name: str = "PDU") -> RedfishTree:
    """A single-mains rack PDU in the DMTF `public-pdu` shape."""
    tree = RedfishTree()
    tree.put(f"{ROOT}/PowerEquipment/RackPDUs", _collection([_PDU]))
    tree.put(
        _PDU,
        {
            "@odata.type": "#PowerDistribution.v1_6_0.PowerDistribution",
            "Id": "1",
            "Name": name,
            "EquipmentType": "RackPDU",
            "Status": {"State": "Enabled", "Health": "OK"},
            "Metrics": _ref(f"{_PDU}/Metrics"),
            "Mains": _ref(f"{_PDU}/Mains"),
        },
    )
    tree.put(f"{_PDU}/Mains", _collection([f"{_PDU}/Mains/AC1"]))
    tree.put(f"{_PDU}/Mains/AC1", {"Id": "AC1", "CircuitType": "Mains"})
    tree.put(f"{_PDU}/Metrics", {"Id": "Metrics"})
    set_pdu(tree, power_w=0.0, energy_kwh=0.0, current_a=0.0, voltage_v=230.0)
    return tree


def set_pdu(
    tree: RedfishTree, *, power_w: float, energy_kwh: float, current_a: float, voltage_v: float
) -> None:
    tree.update(
        f"{_PDU}/Metrics",
        {"PowerWatts": {"Reading": round(power_w, 1)}, "EnergykWh": {"Reading": energy_kwh}},
    )
    tree.update(
        f"{_PDU}/Mains/AC1",
        {"CurrentAmps": {"Reading": round(current_a, 2)}, "Voltage": {"Reading": voltage_v}},
    )
