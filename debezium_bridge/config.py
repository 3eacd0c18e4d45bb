"""Configuration: one declarative model per runner, on pydantic-settings.

Each runner (``convert``, the Spark job, the sidecar) has one :class:`RunnerSettings` model whose
fields say everything at once: the type, the default, the help text (the docstring under the
field), the command-line flag (``--max-pending``, nested ``--ces.max-message-size-kb``), the
environment variable (``<prefix>MAX_PENDING``, nested ``<prefix>CES__MAX_MESSAGE_SIZE_KB``) and
the config-file key (``max_pending``, nested ``ces: {max_message_size_kb: …}``). Precedence:
defaults < file (``--config``: YAML, JSON or Java ``.properties``) < environment < flags.
Unknown keys are rejected; Kafka and schema-registry client settings keep their own dotted
names in a dict field that ``-X key=value`` fills; secrets never show in ``repr`` or logs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    CliSuppress,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from debezium_bridge.errors import ConfigError

MASK = "******"
_SECRET_MARKERS = ("password", "secret", "user.info", "token", "sasl.jaas", "key.pem",
                   "oauthbearer.config", "credentials", "api.key")


def is_secret(key: str) -> bool:
    """Does this client setting name hold a secret (password, JAAS config, token, ...)?"""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def mask_url(value: Any) -> Any:
    """``scheme://user:password@host/...`` with the user info replaced by ``******``."""
    if isinstance(value, str) and "://" in value and "@" in value.split("://", 1)[1]:
        scheme, rest = value.split("://", 1)
        return f"{scheme}://{MASK}@{rest.split('@', 1)[1]}"
    return value


def mask(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of client settings safe to show: secret values and URL credentials masked."""
    return {k: (MASK if is_secret(k) else mask_url(v)) for k, v in settings.items()}


class MaskedSettings(dict[str, str]):
    """Client settings (librdkafka / schema registry names) whose ``repr`` masks secrets."""

    def __repr__(self) -> str:
        return repr(mask(self))


class MaskedUrl(str):
    """A URL whose ``repr`` hides ``user:password@``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(mask_url(str(self)))


ClientSettings = Annotated[CliSuppress[dict[str, str]], AfterValidator(MaskedSettings)]
"""Settings passed through to a Kafka or schema-registry client under their own names
(``-X key=value``); masked when shown."""
Url = Annotated[str, AfterValidator(MaskedUrl)]
"""A service URL that may carry credentials; masked when shown."""


def describe(error: ValidationError) -> str:
    """One line per problem, ``location: message``, without the offending input (it may be a
    secret)."""
    lines = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"]) or "(settings)"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


class Settings(BaseModel):
    """Base of every group of settings: frozen, unknown keys rejected, field docstrings as help.
    Invalid values raise :class:`~debezium_bridge.errors.ConfigError`."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(describe(exc)) from None


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help text from field docstrings, shown without their reStructuredText ``literals``."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        return text.replace("``", "'") if text else text


class RunnerSettings(BaseSettings):
    """Base of a runner's whole configuration (see the module docstring).

    Subclasses set ``env_prefix`` in ``model_config`` and, when they take client settings,
    :attr:`client_settings_field` (the dict field ``-X key=value`` fills; dotted for a field of
    a nested group).
    """

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, env_prefix="DEBEZIUM_BRIDGE_",
        env_nested_delimiter="__", nested_model_default_partial_update=True,
        cli_kebab_case=True, cli_implicit_flags=True, cli_avoid_json=True,
        cli_hide_none_type=True, cli_exit_on_error=False)
    client_settings_field: ClassVar[str | None] = None
    client_settings_help: ClassVar[str] = "client setting under its own name (repeatable)"
    cli_shortcuts: ClassVar[dict[str, str]] = {}
    """Short flags, field name → letter (``{"output": "o"}`` gives ``-o``)."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(describe(exc)) from None

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # the flags come first (added by pydantic-settings), then the environment, then the
        # config file (handed over as init data), then the defaults
        return env_settings, init_settings

    @classmethod
    def parser(cls, prog: str, description: str = "", epilog: str | None = None
               ) -> tuple[argparse.ArgumentParser, CliSettingsSource[Any]]:
        """The command-line parser: ``--config``, ``-X`` and one flag per field."""
        parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                         formatter_class=_HelpFormatter)
        parser.add_argument("--config", metavar="FILE",
                            help="settings file (YAML, JSON or .properties); keys are the field "
                                 "names, nested groups as mappings or dotted properties keys")
        if cls.client_settings_field:
            parser.add_argument("-X", dest="client_settings", action="append", default=[],
                                metavar="KEY=VALUE", help=cls.client_settings_help)
        source: CliSettingsSource[Any] = CliSettingsSource(
            cls, root_parser=parser, cli_kebab_case=True,
                                   cli_implicit_flags=True, cli_avoid_json=True,
                                   cli_hide_none_type=True, cli_exit_on_error=False,
                                   cli_shortcuts=cls.cli_shortcuts)
        return parser, source

    @classmethod
    def from_args(cls, argv: Sequence[str], prog: str, description: str = "",
                  epilog: str | None = None) -> Self:
        """Parse ``argv`` (``--help`` exits), read ``--config`` and ``-X``, and build the
        settings; raises :class:`ConfigError`."""
        parser, source = cls.parser(prog, description, epilog)
        try:
            namespace = parser.parse_args(list(argv))
        except argparse.ArgumentError as exc:
            raise ConfigError(str(exc)) from None
        data = load_config_file(namespace.config, cls) if namespace.config else {}
        return cls.build(data, getattr(namespace, "client_settings", None),
                         _cli_settings_source=source(parsed_args=namespace))

    @classmethod
    def build(cls, data: Mapping[str, Any] | None = None,
              client_settings: Sequence[str] | None = None, **sources: Any) -> Self:
        """Settings from ``data`` (a parsed config file), ``-X`` pairs, the environment and
        (through ``sources``) the command line."""
        data = dict(data or {})
        if client_settings and cls.client_settings_field:
            *groups, field = cls.client_settings_field.split(".")
            target = data
            for group in groups:  # e.g. "source.options": -X fills a nested group's dict
                target[group] = target = dict(target.get(group) or {})
            target[field] = {**dict(target.get(field) or {}), **parse_pairs(client_settings)}
        return cls(**data, **sources)

    def masked(self) -> dict[str, Any]:
        """The settings as plain data with secrets masked (for logs and config dumps)."""
        return _masked(self)

    def __repr_args__(self) -> Any:
        return _masked(self).items()


def _masked(model: BaseModel) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out[name] = _masked(value)
        elif isinstance(value, MaskedSettings):
            out[name] = mask(value)
        elif isinstance(value, MaskedUrl):
            out[name] = mask_url(str(value))
        elif isinstance(value, list | tuple) and value and isinstance(value[0], BaseModel):
            out[name] = [_masked(v) for v in value]
        elif hasattr(value, "get_secret_value"):
            out[name] = MASK
        else:
            out[name] = value
    return out


def parse_pairs(pairs: Sequence[str], flag: str = "-X") -> dict[str, str]:
    """``key=value`` strings into a dict."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} expects key=value, got {pair.split('=')[0]!r}")
        out[key.strip()] = value
    return out


def load_config_file(path: str | Path, model: type[BaseModel] | None = None) -> dict[str, Any]:
    """A YAML, JSON or Java ``.properties`` file as a mapping. Properties keys are flat: given
    the ``model``, dotted keys are nested where their first part names a group or a dict of
    client settings (``ces.bit=boolean``, ``registry.basic.auth.user.info=u:p``), and lists
    are comma-separated."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from exc
    try:
        if p.suffix in (".properties", ".props", ".conf"):
            import javaproperties

            data: Any = javaproperties.loads(text)
            if model is not None:
                data = nest_dotted(data, model)
        elif p.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{p}: not valid {p.suffix.lstrip('.') or 'YAML'}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of settings")
    return data


def nest_dotted(flat: Mapping[str, str], model: type[BaseModel]) -> dict[str, Any]:
    """Flat properties keys into the nesting of ``model`` (see :func:`load_config_file`)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        target, fields, rest = out, model.model_fields, key
        while "." in rest:
            head, tail = rest.split(".", 1)
            field = fields.get(head)
            if field is None:
                break
            kind = _model_of(field.annotation)
            if kind is not None:
                target = target.setdefault(head, {})
                fields, rest = kind.model_fields, tail
                continue
            if _is_dict(field.annotation):
                target.setdefault(head, {})[tail] = value
                rest = ""
            break
        if rest:
            field = fields.get(rest)
            if field is not None and _is_list(field.annotation):
                target[rest] = [item.strip() for item in value.split(",") if item.strip()]
            else:
                target[rest] = value
    return out


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _is_list(annotation: Any) -> bool:
    if annotation in (list, tuple) or get_origin(annotation) in (list, tuple):
        return True
    return any(_is_list(arg) for arg in get_args(annotation))


def _is_dict(annotation: Any) -> bool:
    if annotation is dict or get_origin(annotation) is dict:
        return True
    return any(_is_dict(arg) for arg in get_args(annotation))


def reference(model: type[RunnerSettings], title: str, command: str) -> str:
    """A Markdown reference of every setting of a runner: file key, flag, environment variable,
    default and meaning (``docs/configuration.md`` is generated from it)."""
    prefix = model.model_config.get("env_prefix", "")
    lines = [f"## {title}", "", f"`{command}` — environment variables `{prefix}<KEY>` (nested "
             "keys joined with `__`).", ""]
    if model.client_settings_field:
        lines += [f"`-X key=value` (repeatable) adds a client setting to "
                  f"`{model.client_settings_field}`.", ""]
    lines += _reference_table(model, [], prefix, model.client_settings_field)
    return "\n".join(lines).rstrip() + "\n"


def _reference_table(model: type[BaseModel], path: list[str], prefix: str,
                     client_field: str | None) -> list[str]:
    rows = ["| key | flag / environment | default | meaning |", "|---|---|---|---|"]
    groups: list[tuple[str, type[BaseModel]]] = []
    for name, info in model.model_fields.items():
        group = _model_of(info.annotation)
        if group is not None:
            groups.append((name, group))
            if not _is_list(info.annotation):
                continue
        key = ".".join([*path, name])
        env = prefix + "__".join([*path, name]).upper()
        if any("Positional" in type(m).__name__ for m in info.metadata):
            flag = "(positional)"
        elif key == client_field:
            flag = "-X key=value"
        elif _is_dict(info.annotation) or group is not None:
            flag = "(file only)" if group is not None else "(file, or JSON in the variable)"
        else:
            flag = "--" + key.replace("_", "-")
        default = info.get_default(call_default_factory=True)
        shown = "" if default in (None, "", [], {}, ()) else f"`{default}`"
        doc = " ".join((info.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{key}` | `{flag}`<br>`{env}` | {shown} | {doc} |")
    out = [*rows, ""]
    for name, group in groups:
        doc = " ".join((model.model_fields[name].description or "").split())
        if _is_list(model.model_fields[name].annotation):
            out += [f"### each item of `{'.'.join([*path, name])}`", "", doc, ""]
            out += _reference_table(group, [f"{name}[]"], "", None)
            continue
        out += [f"### `{'.'.join([*path, name])}`", "", doc, ""]
        out += _reference_table(group, [*path, name], prefix, client_field)
    return out
