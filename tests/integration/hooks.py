"""A ``foreach_batch`` hook for the job tests: appends what it saw to ``$HOOK_LOG``."""

from __future__ import annotations

import json
import os
from typing import Any


def record_batch(changes: Any, dead_letters: Any, batch_id: int) -> None:
    with open(os.environ["HOOK_LOG"], "a") as log:
        log.write(json.dumps({"batch": batch_id, "changes": changes.count(),
                              "dead_letters": dead_letters.count()}) + "\n")
