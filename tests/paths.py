"""Where the public sample data lives: ``tests/data`` in this repository.

Each directory of ``tests/data`` has a PROVENANCE.md naming the public source of its files.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
