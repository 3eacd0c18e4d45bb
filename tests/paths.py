"""Where the shared sample data lives (``../shared/data`` beside the checkout)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DEBEZIUM_BRIDGE_SHARED_DATA", ROOT.parent / "shared" / "data"))
