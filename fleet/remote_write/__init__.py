"""Remote write: raw samples shipped to a Prometheus remote-write receiver (Prometheus, Mimir,
VictoriaMetrics, Thanos Receive), for history older than local raw retention.

`wire.py` encodes a WriteRequest (remote write 1.0).
"""
