"""The core's settings: behaviour switches and state bounds of the translator."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from debezium_bridge.config import Settings

NativeMode = Literal["auto", "on", "off"]
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"1", "on", "true", "yes"})


def native_mode(value: Any) -> Any:
    """``auto``/``on``/``off``, also from the switch spellings of an environment variable
    (``DEBEZIUM_BRIDGE_NATIVE=0``)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _OFF:
            return "off"
        if text in _ON:
            return "on"
        return text
    return value


class TranslatorConfig(Settings):
    """Core behaviour switches and state bounds (file keys and flags of every runner)."""

    pair_key_changes: bool = True
    """Merge the delete + create halves of a primary-key change (and equal-key pairs) into one
    update (``--no-pair-key-changes`` emits the halves as they are)."""
    max_pending: int = Field(100_000, ge=1)
    """Events held for ordering and pairing before the lowest positions are released anyway."""
    dedupe_capacity: int = Field(1_000_000, ge=0)
    """Identities remembered for keyless tables and snapshot rows (oldest forgotten first)."""
    native: NativeMode = "auto"
    """The translation core: ``auto`` = the native (Rust) core where the extension is built,
    else the Python reference; ``on`` = native, an error if it is not built; ``off`` = the
    Python reference. ``DEBEZIUM_BRIDGE_NATIVE=0`` forces the Python reference everywhere."""

    @field_validator("native", mode="before")
    @classmethod
    def _native_switch(cls, value: Any) -> Any:
        return native_mode(value)
