"""The core's settings: behaviour switches and state bounds of the translator."""

from __future__ import annotations

from pydantic import Field

from debezium_bridge.config import Settings


class TranslatorConfig(Settings):
    """Core behaviour switches and state bounds (file keys and flags of every runner)."""

    pair_key_changes: bool = True
    """Merge the delete + create halves of a primary-key change (and equal-key pairs) into one
    update (``--no-pair-key-changes`` emits the halves as they are)."""
    max_pending: int = Field(100_000, ge=1)
    """Events held for ordering and pairing before the lowest positions are released anyway."""
    dedupe_capacity: int = Field(1_000_000, ge=0)
    """Identities remembered for keyless tables and snapshot rows (oldest forgotten first)."""
