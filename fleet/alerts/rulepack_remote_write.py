"""The built-in rule on remote write (fleet/remote_write/, docs/operations.md, "Remote write"):
part of the rule pack (fleet/alerts/rulepack.py, `BUILTIN_RULES`)."""

from __future__ import annotations

from fleet.alerts.rulespec import RuleSpec
from fleet.remote_write.lag import LAG_ALERT_S

REMOTE_WRITE_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "remote-write-lag",
        "Remote write behind",
        "site",
        "remote_write_lag_s",
        "ge",
        LAG_ALERT_S,
        LAG_ALERT_S / 2,
        60,
        "warning",
        "Remote write to the TSDB is {value:.0f} s behind",
        f"Raw samples have not reached the remote-write receiver for {LAG_ALERT_S / 60:g}"
        " minutes (a shipper that keeps up trails by one to two): the receiver is down or"
        " refusing, or the maintenance worker is not running. Nothing is lost while raw"
        " retention holds the samples: the shipper resumes from its cursor. One shipper"
        " serves every site, so each site has this alert.",
    ),
)
