"""An ingest child that never answers READY (a database that hangs at connect, say):
`python -m tests.support.hanging_child FD`. Writes its pid where the test can find it."""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    with open(os.environ["HANGING_CHILD_PID_FILE"], "w") as out:
        out.write(str(os.getpid()))
    time.sleep(3600)
    sys.exit(0)
