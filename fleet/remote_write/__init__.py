"""Remote write: raw samples shipped to a Prometheus remote-write receiver (Prometheus, Mimir,
VictoriaMetrics, Thanos Receive), for history older than local raw retention.

`wire.py` encodes a WriteRequest (remote write 1.0), `series.py` owns the metric names and the
bounded labels, `rows.py` reads the raw rows, `ship.py` is one shipper pass with its cursor
(`fleet.models.RemoteWriteCursor`), `lag.py` reads how far behind it is. Off unless
`FLEETWATCH_REMOTE_WRITE_URL` is set (fleetwatch/remote_write_settings.py).
"""
