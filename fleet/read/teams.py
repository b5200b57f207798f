"""How a workload's owner and name read in alerts and reports: the team is the Kubernetes
namespace or the Slurm account (what a route's `owner` filter names), the workload its pod
or job. One owner of these words for the alert engine (fleet/alerts/holders.py) and the
weekly report (fleet/read/weekly_report.py)."""

from __future__ import annotations

from fleet.words import efficiency_words

# A Unix user's process, a container: no namespace, no account (the pages' word).
NO_TEAM = efficiency_words("no_team")


def team_of(namespace: str, account: str) -> str:
    """The team a workload belongs to: its namespace, else its Slurm account, else ''."""
    return namespace or account


def workload_name(kind: str, key: str, pod: str, job: str) -> str:
    """ "train-0" (a pod), "job 1001" (a Slurm job), "uid 1000" (a user's processes), else
    the workload's key (a container ID)."""
    if kind == "pod" and pod:
        return pod
    if kind == "slurm":
        return f"job {job or key}"
    if kind == "user":
        return f"uid {key}"
    return key
