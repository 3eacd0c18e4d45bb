"""Typed runner configuration: defaults, validation, unknown keys rejected, secrets masked.

Values come from (lowest to highest precedence) defaults, a config file (YAML, JSON or Java
properties), ``DEBEZIUM_BRIDGE_*`` environment variables and command-line flags. Kafka and schema
registry client settings keep their librdkafka / Confluent names and are passed through.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from debezium_bridge.errors import ConfigError

ENV_PREFIX = "DEBEZIUM_BRIDGE_"
_SECRET_MARKERS = ("password", "secret", "user.info", "token", "key.password", "sasl.jaas",
                   "key.pem", "oauthbearer.config", "credentials")


def is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def mask(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` safe to log: secret values replaced by ``******``, and
    credentials inside URLs (``scheme://user:password@host``) too."""
    return {k: ("******" if is_secret(k) else mask_url(v)) for k, v in settings.items()}


def mask_url(value: Any) -> Any:
    """``scheme://user:password@host/...`` with the user info replaced by ``******``."""
    if isinstance(value, str) and "://" in value and "@" in value.split("://", 1)[1]:
        scheme, rest = value.split("://", 1)
        return f"{scheme}://******@{rest.split('@', 1)[1]}"
    return value


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` (``key=value`` / ``key: value``, ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            out[line] = ""
        else:
            out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML, JSON or properties file into a flat-or-nested dict."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc}") from exc
    try:
        if p.suffix in (".properties", ".props", ".conf"):
            data: Any = parse_properties(text)
        elif p.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{p}: not valid {p.suffix or 'YAML'}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of settings")
    return data


def parse_overrides(pairs: list[str] | None, flag: str = "-X") -> dict[str, str]:
    """``key=value`` strings (``-X`` style) into a dict."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def env_settings(names: list[str]) -> dict[str, str]:
    """``DEBEZIUM_BRIDGE_<NAME>`` environment variables for the given setting names."""
    out: dict[str, str] = {}
    for name in names:
        value = os.environ.get(ENV_PREFIX + name.upper().replace("-", "_").replace(".", "_"))
        if value is not None:
            out[name] = value
    return out


def build(struct_type: type[Any], settings: Mapping[str, Any]) -> Any:
    """Build and validate a config struct; unknown keys and wrong types raise ConfigError."""
    try:
        return msgspec.convert(dict(settings), struct_type, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
