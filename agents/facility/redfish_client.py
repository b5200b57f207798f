"""A small Redfish HTTP client: keep-alive, basic or session auth, TLS verified by default.

Plain `http.client` rather than DMTF's `redfish` library or `sushy`: the collector
needs only authenticated GETs of JSON bodies, and owning the connection lets one
keep-alive socket serve a whole poll (a CDU is about a dozen GETs) at a small CPU
cost, with every failure mapped to one `TargetError` word.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

from agents.facility.status import TargetError

SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"


def canonical_path(odata_id: str) -> str:
    """`/redfish/v1/Chassis/1/Power/#PowerControl/0` -> `/redfish/v1/Chassis/1/Power`.

    HPE iLO ends ids in `/` and uses fragment ids; the resource is the same.
    """
    path = odata_id.split("#", 1)[0]
    while len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path


class RedfishClient:
    """GETs JSON bodies from one Redfish service; 404 is `None` (no reading), not an error."""

    def __init__(
        self,
        base_url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        auth: str = "basic",
        verify_tls: bool = True,
        ca_file: str | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        parts = urlsplit(base_url if "://" in base_url else f"https://{base_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not a Redfish service address: {base_url!r}")
        if auth not in ("basic", "session", "none"):
            raise ValueError(f"auth must be basic, session or none, got {auth!r}")
        self.base_url = f"{parts.scheme}://{parts.netloc}"
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._username = username
        self._password = password
        self._auth = auth if username else "none"
        self._timeout_s = timeout_s
        self._tls = self._tls_context(verify_tls, ca_file) if self._https else None
        self._conn: http.client.HTTPConnection | None = None
        self._session_token: str | None = None
        self._session_uri: str | None = None
        self.requests = 0  # GETs made, for the benchmark and `check`

    @staticmethod
    def _tls_context(verify: bool, ca_file: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=ca_file)
        if not verify:
            # Only on explicit `verify_tls = false`: many BMCs ship self-signed certificates.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def get(self, path: str) -> dict[str, Any] | None:
        """The JSON body at `path`, or None when the service answers 404.

        Links are followed only inside this service's `/redfish/` tree: a body naming
        another host or path is no reading, never a request elsewhere.
        """
        parts = urlsplit(path)
        if parts.netloc and parts.hostname != self._host:
            return None
        path = canonical_path(parts.path + (f"#{parts.fragment}" if parts.fragment else ""))
        if not path.startswith("/redfish/"):
            return None
        status, body = self._request("GET", path)
        if status == 401 and self._auth == "session" and self._session_token:
            self._session_token = None  # expired session: log in again once
            status, body = self._request("GET", path)
        if status == 404:
            return None
        self._raise_for_status(status, path)
        try:
            document = json.loads(body)
        except ValueError:
            raise TargetError("bad_data", f"{path} is not JSON") from None
        if not isinstance(document, dict):
            raise TargetError("bad_data", f"{path} is not a JSON object")
        return document

    def close(self) -> None:
        if self._session_uri and self._conn is not None:
            # Log out so sessions do not pile up on the BMC (it holds only a few).
            with contextlib.suppress(TargetError):
                self._request("DELETE", self._session_uri)
        self._session_token = self._session_uri = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _raise_for_status(self, status: int, path: str) -> None:
        if status in (401, 403):
            raise TargetError("auth_failed", f"{path} answered {status}: check the credentials")
        if status >= 400:
            raise TargetError("device_error", f"{path} answered HTTP {status}")

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "OData-Version": "4.0"}
        if self._auth == "basic":
            pair = f"{self._username}:{self._password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif self._auth == "session":
            if self._session_token is None:
                self._login()
            headers["X-Auth-Token"] = self._session_token or ""
        return headers

    def _login(self) -> None:
        body = json.dumps({"UserName": self._username, "Password": self._password or ""})
        status, _, headers = self._send(
            "POST", SESSIONS_PATH, {"Content-Type": "application/json"}, body.encode()
        )
        if status in (400, 401, 403):
            raise TargetError("auth_failed", f"session login refused ({status})")
        token = headers.get("x-auth-token")
        if status >= 300 or not token:
            raise TargetError("device_error", f"session login answered {status} without a token")
        self._session_token = token
        location = headers.get("location")
        self._session_uri = urlsplit(location).path if location else None

    def _request(self, method: str, path: str) -> tuple[int, bytes]:
        status, body, _ = self._send(method, path, self._headers(), None)
        self.requests += 1
        return status, body

    def _send(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, bytes, dict[str, str]]:
        # One retry on a fresh connection: keep-alive sockets are closed by BMCs at will.
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                answer = {k.lower(): v for k, v in response.getheaders()}
                if answer.get("connection", "").lower() == "close":
                    self._drop()
                return response.status, data, answer
            except TimeoutError:
                self._drop()
                raise TargetError("timeout", f"no answer within {self._timeout_s:g}s") from None
            except ssl.SSLError as exc:
                self._drop()
                raise TargetError("unreachable", f"TLS failed: {exc.reason}") from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop()
                if attempt == 2:
                    raise TargetError("unreachable", "connection closed by the device") from None
            except http.client.HTTPException as exc:
                self._drop()
                raise TargetError("protocol_error", f"bad HTTP answer: {exc!r}") from None
            except OSError as exc:
                self._drop()
                raise TargetError("unreachable", exc.strerror or str(exc)) from None
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout_s, context=self._tls
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self._host, self._port, timeout=self._timeout_s
                )
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
