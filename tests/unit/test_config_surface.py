"""The configuration surface as documented: precedence (flags and ``-X`` over the environment),
values from the environment, librdkafka settings, masking, the Spark job's CES defaults, log
levels, auxiliary files and the generated reference (docs/configuration.md, docs/cli.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.cli import EXIT_IO, EXIT_USAGE, main
from debezium_bridge.cli.convert import ConvertConfig
from debezium_bridge.cli.reference import RUNNERS
from debezium_bridge.clients.kafka import open_client
from debezium_bridge.config import MASK, is_secret, mask_url
from debezium_bridge.errors import ConfigError
from debezium_bridge.sidecar.config import SidecarConfig
from debezium_bridge.spark.job import JobConfig, load_job_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
JOB = {"source": {"options": {"subscribe": "t", "kafka.bootstrap.servers": "h:9092"}},
       "sinks": [{"kind": "console"}], "checkpoint": "c"}


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(JOB))
    return path


def _job_file(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "job-changed.json"
    path.write_text(json.dumps({**JOB, **changes}))
    return path


# -- 1. precedence: configuration.md "lowest to highest precedence: … environment variables
#       and command-line flags (`-X` included)" --------------------------------------------

def test_x_wins_over_the_environment_for_the_sidecar(monkeypatch) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SIDECAR_KAFKA",
                       '{"sasl.username": "env", "client.id": "from-env"}')
    config = SidecarConfig.from_args(["--subscribe", "t", "-X", "sasl.username=flag"],
                                     prog="t")
    assert dict(config.kafka) == {"sasl.username": "flag", "client.id": "from-env"}


def test_x_wins_over_the_environment_for_convert(monkeypatch) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_REGISTRY", '{"max.retries": "1"}')
    config = ConvertConfig.from_args(["x", "--schema-registry", "http://sr",
                                      "-X", "max.retries=9"], prog="t")
    assert config.registry["max.retries"] == "9"


def test_x_wins_over_the_environment_and_the_file_for_the_spark_job(
        job_file: Path, monkeypatch) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SPARK_SOURCE__OPTIONS", '{"startingOffsets": "latest"}')
    config = JobConfig.from_args(["--config", str(job_file), "-X", "startingOffsets=earliest"],
                                 prog="t")
    assert dict(config.source.options) == {"subscribe": "t", "kafka.bootstrap.servers": "h:9092",
                                           "startingOffsets": "earliest"}
    assert load_job_config(str(job_file), ["startingOffsets=earliest"]) \
        .source.options["startingOffsets"] == "earliest"


def test_the_environment_still_wins_over_the_file(job_file: Path, monkeypatch) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SPARK_SOURCE__OPTIONS", '{"subscribe": "from-env"}')
    assert JobConfig.from_args(["--config", str(job_file)], prog="t") \
        .source.options["subscribe"] == "from-env"


# -- 2. environment values: configuration.md "Lists are comma-separated in flags, `.properties`
#       files and environment variables (a variable may also hold a JSON array) … A value that
#       cannot be parsed is a configuration error (exit code 2)" ---------------------------

def test_lists_in_the_environment_are_comma_separated_or_json(monkeypatch) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SIDECAR_SUBSCRIBE", "a, b")
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SIDECAR_OUTPUTS", '["canonical", "ces"]')
    config = SidecarConfig.from_args([], prog="t")
    assert config.subscribe == ["a", "b"]
    assert config.outputs == ["canonical", "ces"]


def test_nested_lists_in_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_CDC__NULL_VALUES", "NULL")
    assert ConvertConfig.from_args(["x"], prog="t").cdc.null_values == ["NULL"]


def test_undecodable_environment_values_are_configuration_errors(monkeypatch, capsys) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SIDECAR_KAFKA", "{oops")
    with pytest.raises(ConfigError, match="DEBEZIUM_BRIDGE_SIDECAR_KAFKA: expected JSON"):
        SidecarConfig.from_args(["--subscribe", "t"], prog="t")
    assert main(["sidecar", "--subscribe", "t"]) == EXIT_USAGE
    assert "DEBEZIUM_BRIDGE_SIDECAR_KAFKA" in capsys.readouterr().err


def test_undecodable_nested_environment_value_names_its_variable(job_file: Path,
                                                                 monkeypatch) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SPARK_SOURCE__OPTIONS", "{oops")
    with pytest.raises(ConfigError, match="DEBEZIUM_BRIDGE_SPARK_SOURCE__OPTIONS"):
        JobConfig.from_args(["--config", str(job_file)], prog="t")


# -- 3. librdkafka settings: docs/cli.md exit code "`2` usage or configuration error";
#       docs/sidecar.md "settings librdkafka rejects, are configuration errors (exit 2)" ----

def test_unknown_librdkafka_setting_is_a_configuration_error(capsys) -> None:
    code = main(["consume", "t", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "1",
                 "-X", "bogus.prop=1"])
    assert code == EXIT_USAGE
    assert "bogus.prop" in capsys.readouterr().err


def test_invalid_librdkafka_value_names_the_key_given() -> None:
    from confluent_kafka import Producer

    with pytest.raises(ConfigError, match=r"Kafka setting linger\.ms: Invalid value"):
        open_client(Producer, {"linger.ms": "abc"})
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        open_client(Producer, {"enable.idempotence": "maybe"})


def test_rejected_secret_value_is_not_shown() -> None:
    from confluent_kafka import Producer

    with pytest.raises(ConfigError, match=r"Kafka setting ssl\.key\.pem: invalid value$"):
        open_client(Producer, {"security.protocol": "ssl", "ssl.key.pem": "hunter2"})


def test_an_unknown_setting_is_named_even_when_it_looks_secret() -> None:
    """librdkafka's "No such configuration property" carries no value to hide."""
    from confluent_kafka import Producer

    with pytest.raises(ConfigError, match=r"sasl\.password\.bogus: No such configuration"):
        open_client(Producer, {"sasl.password.bogus": "hunter2"})
    with pytest.raises(ConfigError, match=r"stats_cb"):  # a callback setting given text
        open_client(Producer, {"stats_cb": "x"})


# -- 4. masking: configuration.md "secrets among them, and credentials inside URLs, are
#       masked wherever settings are shown" ----------------------------------------------

def test_every_url_of_a_list_is_masked() -> None:
    shown = mask_url("http://a:pw1@sr1:8081,http://b:p@w2@sr2:8081/path,http://sr3")
    assert shown == f"http://{MASK}@sr1:8081,http://{MASK}@sr2:8081/path,http://sr3"


@pytest.mark.parametrize("key", ["sasl.oauthbearer.assertion.private.key.passphrase",
                                 "kafka.ssl.keystore.key", "ssl.key.pem", "kafka.ssl.key.password"])
def test_private_keys_and_passphrases_are_secrets(key: str) -> None:
    assert is_secret(key)


def test_sidecar_and_job_settings_shown_masked(job_file: Path) -> None:
    sidecar = SidecarConfig.from_args(
        ["--subscribe", "t", "--schema-registry", "http://a:pw1@sr1,http://b:pw2@sr2",
         "-X", "sasl.oauthbearer.assertion.private.key.passphrase=pp-secret"], prog="t")
    job = JobConfig.from_args(["--config", str(job_file),
                               "-X", "kafka.ssl.keystore.key=-----BEGIN PRIVATE KEY-----x"],
                              prog="t")
    for shown in (json.dumps(sidecar.masked()), repr(sidecar), json.dumps(job.masked()),
                  repr(job)):
        assert not re.search("pw1|pw2|pp-secret|BEGIN PRIVATE KEY", shown), shown


# -- 5. the Spark job's CES snapshot rows: configuration.md row `translate.ces.snapshot_rows`
#       default `skip`; docs/spark.md "is `skip` by default and must stay so, whatever other
#       `translate.ces` keys are set" ------------------------------------------------------

def test_spark_ces_snapshot_rows_stay_skipped_when_other_ces_keys_are_set(
        tmp_path: Path, monkeypatch) -> None:
    path = _job_file(tmp_path, translate={"outputs": ["ces"], "ces": {"bit": "boolean"}})
    assert JobConfig.from_args(["--config", str(path)], prog="t") \
        .translate.ces.snapshot_rows == "skip"
    plain = _job_file(tmp_path, translate={"outputs": ["ces"]})
    flagged = JobConfig.from_args(["--config", str(plain), "--translate.ces.bit", "boolean"],
                                  prog="t")
    assert (flagged.translate.ces.bit, flagged.translate.ces.snapshot_rows) == ("boolean", "skip")
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SPARK_TRANSLATE__CES__BIT", "boolean")
    assert JobConfig.from_args(["--config", str(plain)], prog="t") \
        .translate.ces.snapshot_rows == "skip"


def test_spark_ces_snapshot_rows_default_is_documented_as_skip() -> None:
    help_text = " ".join(JobConfig.parser("t")[0].format_help().split())
    assert re.search(r"--translate\.ces\.snapshot-rows \{insert,skip\}[^-]*\(default: skip\)",
                     help_text)
    reference = (DOCS / "configuration.md").read_text()
    assert re.search(r"^\| `translate\.ces\.snapshot_rows` \|[^|]*\| `skip` \|", reference,
                     re.MULTILINE)


# -- 6. log levels: configuration.md "`DEBEZIUM_BRIDGE_LOG_LEVEL` (`DEBUG`, `INFO`, `WARNING`,
#       `ERROR` or `CRITICAL` …)"; docs/cli.md "`2` usage or configuration error" ----------

def test_unknown_log_level_in_the_environment_is_a_configuration_error(
        monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_LOG_LEVEL", "LOUD")
    assert main(["convert", str(tmp_path / "any.jsonl")]) == EXIT_USAGE
    assert "DEBEZIUM_BRIDGE_LOG_LEVEL" in capsys.readouterr().err


def test_spark_log_levels_are_validated(job_file: Path) -> None:
    config = JobConfig.from_args(["--config", str(job_file), "--log-level", "debug",
                                  "--spark-log-level", "warn"], prog="t")
    assert (config.log_level, config.spark_log_level) == ("DEBUG", "WARN")
    for flag in ("--log-level", "--spark-log-level"):
        with pytest.raises(ConfigError, match="log_level"):
            JobConfig.from_args(["--config", str(job_file), flag, "LOUD"], prog="t")


# -- 7. auxiliary input files: docs/cli.md "`3` an input/output file could not be read or
#       written" ---------------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--table-schemas", "--avro-schemas",
                                    "--cdc.capture-instances", "--cdc.lsn-time-mapping"])
def test_unreadable_auxiliary_file_is_an_io_error_naming_its_option(
        option: str, tmp_path: Path, capsys) -> None:
    dump = tmp_path / "in.jsonl"
    dump.write_text("")
    code = main(["convert", str(dump), "-o", str(tmp_path / "out"), option,
                 str(tmp_path / "missing.json")])
    assert code == EXIT_IO
    assert f"cannot read {option} file" in capsys.readouterr().err


# -- 8. the generated reference names only flags and variables that exist ---------------

def test_every_documented_flag_is_accepted() -> None:
    sections = re.split(r"^## ", (DOCS / "configuration.md").read_text(), flags=re.MULTILINE)
    for (model, title, _), section in zip(RUNNERS, sections[1:], strict=True):
        assert section.startswith(title)
        parser = model.parser("t")[0]
        accepted = {option for action in parser._actions for option in action.option_strings}
        documented = set(re.findall(r"^\| `[^`]+` \| `(--[^`]+)`", section, re.MULTILINE))
        assert documented <= accepted, (title, documented - accepted)
        assert "PydanticUndefined" not in section
        assert "[]__" not in section  # items of a list of groups have no variables
