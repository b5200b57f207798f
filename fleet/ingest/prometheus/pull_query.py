"""The queries of a Prometheus pull: prometheus-api-client's connection, the PromQL asked,
and the answers as (labels, points) — for `fleet.ingest.prometheus.pull`, which stores them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import orjson
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException

from fleet.ingest.prometheus.mapping import PULLED_FIELDS
from fleet.ingest.prometheus.pull_match import Labels
from fleet.models import PrometheusSource
from fleet.secrets import SecretError

# Prometheus' [time, "value"] pairs as its API sends them, in time order.
Points = Sequence[Sequence[Any]]
Sink = Callable[[Labels, Points], None]
QUERY_TIMEOUT_S = 10
QUERY_THREADS = 4


class SourceDown(Exception):
    """The source's Prometheus did not answer, or answered an error."""


class Client(PrometheusConnect):
    """prometheus-api-client's connection (URL, auth, TLS, session) with one query call
    that skips what costs most for tens of thousands of series: gzip on a LAN (Prometheus
    spent more CPU compressing than the transfer saved) and the stdlib JSON decoder."""

    def query_raw(self, query: str, at: float) -> list[dict[str, Any]]:
        response = self._session.request(
            method=self._method,
            url=f"{self.url}/api/v1/query",
            params={"query": query, "time": at},
            verify=self._session.verify,
            headers={**(self.headers or {}), "Accept-Encoding": "identity"},
            auth=self.auth,
            cert=self._session.cert,
            timeout=self._timeout,
        )
        if response.status_code != 200:
            raise PrometheusApiClientException(
                f"HTTP {response.status_code}: {response.content[:300]!r}"
            )
        result: list[dict[str, Any]] = orjson.loads(response.content)["data"]["result"]
        return result


def client_for(source: PrometheusSource) -> Client:
    try:
        token, password = source.bearer_token, source.basic_password
    except SecretError as exc:  # its key is gone: the source is down until it is back
        raise SourceDown(str(exc)) from None
    headers = {"Authorization": f"Bearer {token}"} if token else None
    auth = (source.basic_user, password) if source.basic_user else None
    return Client(
        url=source.url.rstrip("/"),
        headers=headers,
        auth=auth,
        disable_ssl=not source.verify_tls,
        timeout=QUERY_TIMEOUT_S,
    )


def extra_matchers(source: PrometheusSource) -> str:
    return source.selector.strip().strip("{}").strip()


def identity_labels(source: PrometheusSource) -> tuple[str, ...]:
    """The labels a pull keeps: what names the GPU, and the scrape target."""
    hosts = [h.strip() for h in source.host_labels.split(",") if h.strip()]
    return tuple(dict.fromkeys(("UUID", "gpu", "instance", *hosts)))


def field_query(source: PrometheusSource, name: str) -> str:
    """`max by (UUID, gpu, instance, <host labels>) (NAME{<extra>})`: one series per GPU,
    carrying only the labels that name it. A pod's labels on the exporter's series would
    otherwise double the answer (measured: 25 MB → 11 MB for 80,000 series) and split a
    GPU in two while its pod changes."""
    by = ",".join(identity_labels(source))
    return f"max by ({by}) ({name}{{{extra_matchers(source)}}})"


def scrape_time_query(source: PrometheusSource, name: str) -> str:
    """Each scrape target's newest scrape of a field (`timestamp()` of a selector is the
    sample's own time): Prometheus stamps every sample of one scrape with that scrape's
    time, so it is the time of each of the target's values of the field."""
    return f"max by (instance) (timestamp({name}{{{extra_matchers(source)}}}))"


REFERENCE_FIELD = "DCGM_FI_DEV_GPU_TEMP"  # in every dcgm-exporter list
_POD_BY = ("GPU_I_ID", "namespace", "pod", "container")


def pod_query(source: PrometheusSource) -> str:
    """Each GPU's series that name a pod, with their pod labels (fleet/ingest/prometheus/
    pull_pods.py): those renamed `exported_*` by the scrape, and those naming a pod that is
    not their scrape target's own (`up` carries a target's labels: where the scrape set
    `pod`, a GPU without one shows the exporter's pod). Empty labels never match `!=""`."""
    by = ",".join((*identity_labels(source), *_POD_BY, *(f"exported_{n}" for n in _POD_BY[1:])))

    def of(matcher: str) -> str:
        selector = ",".join(m for m in (extra_matchers(source), matcher) if m)
        return f"group by ({by}) ({REFERENCE_FIELD}{{{selector}}})"

    renamed, named = of('exported_pod!=""'), of('pod!=""')
    own = "group by (instance, namespace, pod) (up)"
    return f"{renamed} or ({named} unless on (instance, namespace, pod) {own})"


def fetch_recent(
    source: PrometheusSource, now: float, sink: Sink, pods: Sink | None = None
) -> None:
    """Each pulled field's newest value per GPU, stamped with its scrape's time, handed to
    `sink` field by field as the answers arrive (matching overlaps the next queries); then,
    where `pods` is given, each series `pod_query` answers, stamped alike.

    Every field of a target comes from one scrape, so one field's scrape times (per
    `instance`) serve all of them; a field whose target that answer lacks asks for its
    own. Times are asked before values: a scrape landing in between makes a value look
    older than it is (and the next pull stores it again at its own time), never newer.
    All is evaluated at one instant a second back, by which time a scrape is stored."""
    at = now - 1.0
    client = client_for(source)

    def values_of(name: str) -> list[dict[str, Any]]:
        return client.query_raw(field_query(source, name), at)

    def times_of(name: str) -> dict[str, float]:
        answer = client.query_raw(scrape_time_query(source, name), at)
        return {s["metric"].get("instance", ""): float(s["value"][1]) for s in answer}

    oldest = now - source.lookback_s
    scraped = _ask(partial(times_of, REFERENCE_FIELD), source)
    with ThreadPoolExecutor(QUERY_THREADS) as pool:
        answers = pool.map(values_of, PULLED_FIELDS)
        for name in PULLED_FIELDS:
            values = _ask(partial(next, answers), source)
            times = scraped
            missing = False
            for s in values:
                labels = s["metric"]
                ts = times.get(labels.get("instance", ""))
                if ts is None:
                    if not missing:
                        times = scraped | _ask(partial(times_of, name), source)
                        missing = True
                    ts = times.get(labels.get("instance", ""))
                if ts is None or ts < oldest:
                    continue  # a target Prometheus stopped scraping: its last value is old
                labels["__name__"] = name
                sink(labels, ((ts, s["value"][1]),))
    if pods is not None:
        for s in _ask(partial(client.query_raw, pod_query(source), at), source):
            ts = scraped.get(s["metric"].get("instance", ""))
            if ts is not None and ts >= oldest:
                pods(s["metric"], ((ts, s["value"][1]),))


def fetch_range(
    source: PrometheusSource, start: float, end: float, step_s: float
) -> list[tuple[Labels, Points]]:
    """Each pulled field per GPU evaluated every `step_s` over [start, end] (a backfill)."""
    client = client_for(source)

    def one(name: str) -> Any:
        return client.custom_query_range(
            field_query(source, name),
            start_time=dt.datetime.fromtimestamp(start, dt.UTC),
            end_time=dt.datetime.fromtimestamp(end, dt.UTC),
            step=f"{step_s:g}s",
        )

    with ThreadPoolExecutor(QUERY_THREADS) as pool:
        answers = _ask(lambda: list(pool.map(one, PULLED_FIELDS)), source)
    out: list[tuple[Labels, Points]] = []
    for name, answer in zip(PULLED_FIELDS, answers, strict=True):
        for s in answer:
            s["metric"]["__name__"] = name
            out.append((s["metric"], s["values"]))
    return out


def _ask(call: Any, source: PrometheusSource) -> Any:
    try:
        return call()
    except requests.exceptions.RequestException as exc:
        raise SourceDown(f"cannot reach {source.url}: {_short(exc)}") from exc
    except Exception as exc:  # the client raises its own errors for non-2xx answers
        raise SourceDown(f"{source.url} answered an error: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}"[:500]
