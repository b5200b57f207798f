"""Fleetwatch project package. Loading the Celery app here makes `@shared_task`
bind to it in every process that imports Django (web, workers, manage.py)."""

from __future__ import annotations

from fleetwatch.celery import app as celery_app

__all__ = ("celery_app",)
