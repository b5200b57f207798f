"""Ingest: authentication, validation and the batched durable write path."""
