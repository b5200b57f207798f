"""When a process started, in Unix time, from `/proc` (man7 proc_pid_stat(5), proc_stat(5)).

`/proc/<pid>/stat` field 22, `starttime`, is the time the process started after system boot,
in clock ticks (`sysconf(_SC_CLK_TCK)`, 100 on Linux); `/proc/stat`'s `btime` line is the
boot time in whole seconds since the epoch. Their sum is exact to a tick, plus the second
`btime` is rounded to: the server needs it to place an interval's start between two
10-second snapshots.

The second field, `comm`, is in parentheses and may itself hold spaces and `)`: the fields
after it are counted from the LAST `)`.
"""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of starttime on this host
_STARTTIME_AFTER_COMM = 22 - 3  # field 22, counted from field 3 (state), the first after `)`


def start_ticks(stat: str) -> int | None:
    """Field 22 of a `/proc/<pid>/stat` line; None for a malformed one."""
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) <= _STARTTIME_AFTER_COMM:
        return None
    value = fields[_STARTTIME_AFTER_COMM]
    return int(value) if value.isdigit() else None


def boot_time(stat: str) -> int | None:
    """The `btime` of `/proc/stat`: the boot, in whole Unix seconds; None when absent."""
    for line in stat.splitlines():
        if line.startswith("btime "):
            value = line.split()[1] if len(line.split()) > 1 else ""
            return int(value) if value.isdigit() else None
    return None


def started_at(boot: int, ticks: int, hz: int = CLOCK_TICKS) -> float:
    """Unix time of a process that started `ticks` after a boot at `boot`."""
    return round(boot + ticks / hz, 2)
