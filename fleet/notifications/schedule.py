"""How often the notification housekeeping runs, one owner for the beat schedule
(fleetwatch/celery.py) and the tasks (fleet/notifications/tasks.py). Each tick expires
before the next is due, so a worker outage leaves one useful run queued, not a backlog.
Nothing here imports Django: the Celery app reads it before Django is set up."""

from __future__ import annotations

# Re-queues deliveries whose task was lost (a broker restart): nothing is dropped.
SWEEP_EVERY_S = 60.0
SWEEP_EXPIRES_S = 50.0
# The weekly report (fleet/notifications/weekly.py) is looked for every hour and posted
# once per site and week.
WEEKLY_CHECK_EVERY_S = 3600.0
WEEKLY_CHECK_EXPIRES_S = 3000.0
