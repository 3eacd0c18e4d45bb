"""The package's import structure: no module cycles, even through late imports (the layers and
the Spark/Kafka-free core are checked by import-linter, see pyproject.toml and scripts/test)."""

from __future__ import annotations

import grimp


def test_no_import_cycles_between_modules() -> None:
    graph = grimp.build_graph("debezium_bridge", exclude_type_checking_imports=False)
    cycles = sorted({tuple(sorted((importer, imported)))
                     for importer in graph.modules
                     for imported in graph.find_modules_directly_imported_by(importer)
                     if imported.startswith("debezium_bridge")
                     and graph.chain_exists(importer=imported, imported=importer)})
    assert cycles == []


def test_test_tooling_is_used_only_by_the_dev_commands() -> None:
    """debezium_bridge.testing (simulator, embedded broker, validators) is not imported by the
    runtime package, except the CLI's samples and broker commands."""
    graph = grimp.build_graph("debezium_bridge")
    users = {m for m in graph.find_modules_that_directly_import("debezium_bridge.testing",
                                                                  as_package=True)
             if not m.startswith("debezium_bridge.testing")}
    assert users <= {"debezium_bridge.cli.tools"}
