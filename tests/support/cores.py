"""Run a test suite on both translation cores: the native one (Rust) and the Python reference.

``DEBEZIUM_BRIDGE_NATIVE=1`` requires the native core, so a suite run on ``native`` fails (it
never falls back silently) when the extension is not built; ``0`` forces the reference.
Subprocesses (the CLI) inherit the variable.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

CORES = ("native", "python")


@pytest.fixture(params=CORES, autouse=True)
def translation_core(request: pytest.FixtureRequest,
                     monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_NATIVE", "1" if request.param == "native" else "0")
    yield request.param
