"""Collectors: each reads one thing on the host or the facility and returns samples."""
