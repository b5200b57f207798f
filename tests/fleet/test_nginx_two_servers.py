"""Two server processes behind a real nginx running the shipped site config
(docs/examples/nginx.conf; docs/operations.md, "Several server processes"): agents ingesting
through the proxy over HTTP and WebSocket reach both processes and every sample is stored
once, and a browser on either process, or on the proxy, is pushed data the other process
ingested (the live fan-out goes through Redis). Services tier: PostgreSQL and Redis."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from fleetwatch.serve import WS_MAX_SIZE
from tests.support import needs
from tests.support.agent import gpu_batch, post_json
from tests.support.browser import launched_chromium
from tests.support.celery_proc import private_broker
from tests.support.live import PASSWORD, USER, create_ops_user
from tests.support.nginx import SHIPPED, Nginx, nginx_binary
from tests.support.server import METRICS_TOKEN, FleetServer

pytestmark = pytest.mark.services

BATCHES = 10  # per agent
GPUS = 8  # per batch (tests.support.agent.gpu_batch)


class Site:
    """Two server processes (`a`, `b`) on one PostgreSQL database and Redis, behind nginx."""

    def __init__(self, a: FleetServer, b: FleetServer, proxy: Nginx) -> None:
        self.a, self.b, self.proxy = a, b, proxy

    def enroll(self, node: str) -> str:
        """Enrol through the proxy, as an agent configured with the public URL does."""
        status, body = post_json(
            self.proxy.url + "/api/v1/enroll",
            {"enroll_token": self.a.enroll_token, "source": f"node:{node}"},
        )
        assert status == 201, body
        return str(body["token"])

    def stored(self, nodes: list[str]) -> int:
        marks = ", ".join("?" * len(nodes))
        where = f"node_id IN (SELECT id FROM fleet_node WHERE name IN ({marks}))"
        return self.a.count("gpu", where, tuple(nodes))

    def logs(self) -> str:
        servers = [
            f"--- server {s.port} ---\n{s.log_path.read_text()[-2000:]}" for s in (self.a, self.b)
        ]
        return "\n".join([*servers, self.proxy.logs()])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    if nginx_binary() is None:
        needs.missing(needs.SERVICES, "nginx is not installed (apt-get install nginx)")
    var_dir = tmp_path_factory.mktemp("two-servers")
    # A Redis database of the test's own: live groups are named by site id, and other
    # tests' servers on the shared database have sites with the same ids.
    with (
        private_broker("services") as redis_url,
        FleetServer.started(var_dir / "var", tier="services", redis_url=redis_url) as first,
    ):
        create_ops_user(first)
        with (
            first.with_siblings(1) as (a, b),
            Nginx.started(var_dir / "nginx", upstreams=[a.port, b.port]) as proxy,
        ):
            yield Site(a, b, proxy)


def ws_agent(site: Site, node: str) -> Any:
    token = site.enroll(node)
    return connect(
        site.proxy.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=10,
    )


def child_pids(server: FleetServer) -> set[int]:
    """The server process's children: its ingest writers."""
    assert server.proc is not None
    pid = server.proc.pid
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(child) for child in text.split()}


def test_agents_through_nginx_reach_both_processes_and_each_sample_is_stored_once(
    site: Site,
) -> None:
    t0 = time.time() - 60
    ws_nodes = [f"gpu-a05-0{n}" for n in (1, 2, 3)]
    http_nodes = [f"gpu-a06-0{n}" for n in (1, 2, 3)]
    with contextlib.ExitStack() as open_sockets:  # open together: least_conn spreads them
        sockets = [open_sockets.enter_context(ws_agent(site, node)) for node in ws_nodes]
        for seq in range(1, BATCHES + 1):
            for node, ws in zip(ws_nodes, sockets, strict=True):
                ws.send(json.dumps(gpu_batch(node, seq, ts=t0 + seq)))
        for ws in sockets:
            acks = [json.loads(ws.recv(timeout=10))["ack"] for _ in range(BATCHES)]
            assert acks == list(range(1, BATCHES + 1))
    tokens = {node: site.enroll(node) for node in http_nodes}
    for seq in range(1, BATCHES + 1):
        for node in http_nodes:
            batch = gpu_batch(node, seq, ts=t0 + seq)
            status, body = post_json(site.proxy.url + "/api/v1/ingest", batch, tokens[node])
            assert (status, body.get("ack")) == (200, seq), body

    # every sample stored exactly once
    sent = (len(ws_nodes) + len(http_nodes)) * BATCHES * GPUS
    assert site.stored(ws_nodes + http_nodes) == sent

    # the proxy's log: both processes took agent sockets and HTTP batches
    ports = {site.a.port, site.b.port}
    deadline = time.monotonic() + 5  # a socket's line is written once nginx closed it
    while set(site.proxy.upstreams_used("/ws/ingest/")) != ports and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(site.proxy.upstreams_used("/ws/ingest/")) == ports, site.logs()
    assert set(site.proxy.upstreams_used("/api/v1/ingest")) == ports, site.logs()

    # and each process's own ingest writer stored batches (fleet_ingestwriter, "host:pid:…",
    # saved every 10 s): the writers are children of both server processes
    writers = {server.port: child_pids(server) for server in (site.a, site.b)}

    def batches_by_server() -> dict[int, int]:
        rows = site.a.query("SELECT writer, batches FROM fleet_ingestwriter")
        pid_batches = {int(str(writer).split(":")[1]): int(n) for writer, n in rows}
        return {
            port: sum(pid_batches.get(pid, 0) for pid in pids) for port, pids in writers.items()
        }

    deadline = time.monotonic() + 15
    while min(batches_by_server().values()) == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    by_server = batches_by_server()
    assert min(by_server.values()) > 0, (by_server, site.logs())


def test_a_request_body_up_to_the_ingest_limit_reaches_the_server_and_larger_stops_at_nginx(
    site: Site,
) -> None:
    token = site.enroll("gpu-a07-01")

    def post(size: int) -> tuple[int, str]:
        head, tail = b'{"protocol": 1, "pad": "', b'"}'
        body = head + b"x" * (size - len(head) - len(tail)) + tail
        request = urllib.request.Request(
            site.proxy.url + "/api/v1/ingest",
            data=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    status, text = post(WS_MAX_SIZE)  # over the 1 MiB batch limit: the server says why
    assert status == 413 and json.loads(text)["error"]["reason"] == "batch larger than 1 MiB"
    status, text = post(WS_MAX_SIZE + 1)  # past the proxy's limit: nginx's own page
    assert status == 413 and "nginx" in text
    assert f"client_max_body_size {WS_MAX_SIZE // 1024}k;" in SHIPPED.read_text()


def test_plain_http_is_redirected_to_https(site: Site) -> None:
    request = urllib.request.Request(site.proxy.redirect_url + "/racks/?x=1")

    class NoFollow(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoFollow)
    with pytest.raises(urllib.error.HTTPError) as answer:
        opener.open(request, timeout=10)
    assert answer.value.code == 301
    assert answer.value.headers["Location"] == "https://127.0.0.1/racks/?x=1"


def test_metrics_through_the_proxy_is_for_listed_addresses_and_still_wants_the_token(
    site: Site,
) -> None:
    """The shipped config lets only the addresses it lists (loopback among them) reach
    /metrics; Fleetwatch behind it still refuses a scrape without the token."""
    shipped = SHIPPED.read_text()
    block = shipped.split("location = /metrics {", 1)[1].split("}", 1)[0]
    assert "allow 127.0.0.1;" in block and "deny all;" in block
    url = site.proxy.url + "/metrics"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401 and "FLEETWATCH_METRICS_TOKEN" in refused.value.read().decode()
    scrape = urllib.request.Request(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    with urllib.request.urlopen(scrape, timeout=10) as answer:
        assert b"fleetwatch_rack_power_budget_watts" in answer.read()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_chromium()


def test_pages_on_either_process_and_on_the_proxy_are_pushed_what_the_other_ingested(
    site: Site, browser: Any
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        login = context.new_page()
        login.goto(site.proxy.url + "/admin/login/?next=/")
        login.fill("#id_username", USER)
        login.fill("#id_password", PASSWORD)
        login.click("input[type=submit]")
        login.wait_for_selector("h1:has-text('Fleet overview')")  # signed in through nginx
        pages = {"proxy": login}
        for name, server in (("a", site.a), ("b", site.b)):  # one session: cookies ignore ports
            pages[name] = context.new_page()
            pages[name].goto(server.url + "/")
        for page in pages.values():
            page.wait_for_selector("#live-status[data-state='live']")

        rack = dict(site.a.query("SELECT name, id FROM fleet_rack"))
        # A03's node sends to process b, A04's to process a (straight, not through nginx)
        for server, node in ((site.b, "gpu-a03-01"), (site.a, "gpu-a04-01")):
            token = site.enroll(node)
            batch = gpu_batch(node, 1, power_w=612.5)
            assert post_json(server.url + "/api/v1/ingest", batch, token)[0] == 200

        def shows_power(page: Any, rack_name: str) -> None:
            power = page.locator(f"#rack-{rack[rack_name]} [data-field=power]")
            page.wait_for_function(
                "el => el.textContent.trim() === '4.9'", arg=power.element_handle(), timeout=10000
            )

        shows_power(pages["a"], "A03")  # ingested by b, pushed by a
        shows_power(pages["b"], "A04")  # ingested by a, pushed by b
        shows_power(pages["proxy"], "A03")  # whichever process holds its socket,
        shows_power(pages["proxy"], "A04")  # one of these came from the other
        assert all(page.evaluate("performance.navigation.type") == 0 for page in pages.values())
    finally:
        context.close()
