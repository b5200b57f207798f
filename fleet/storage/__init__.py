"""Time-series storage: raw samples, 1-minute and 1-hour rollups, latest state.

Tables are plain SQL (not ORM models) because they are written in bulk by the
ingest writer and read by a handful of queries; `schema.py` generates their DDL
from the metric catalogue, one wide table per sample kind and tier.
"""
