"""Configuration: one declarative model per runner, on pydantic-settings.

Each runner (``convert``, the Spark job, the sidecar) has one :class:`RunnerSettings` model whose
fields say everything at once: the type, the default, the help text (the docstring under the
field), the command-line flag (``--max-pending``, nested ``--ces.max-message-size-kb``), the
environment variable (``<prefix>MAX_PENDING``, nested ``<prefix>CES__MAX_MESSAGE_SIZE_KB``) and
the config-file key (``max_pending``, nested ``ces: {max_message_size_kb: …}``). Precedence:
defaults < file (``--config``: YAML, JSON or Java ``.properties``) < environment < flags
(``-X`` included). Unknown keys are rejected; Kafka and schema-registry client settings keep
their own dotted names in a dict field that ``-X key=value`` fills; secrets never show in
``repr`` or logs. Lists are comma-separated in flags, ``.properties`` files and environment
variables (or JSON arrays in variables); dicts are JSON objects in variables.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    CliSuppress,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from debezium_bridge.errors import ConfigError

MASK = "******"
_SECRET_MARKERS = ("password", "passphrase", "secret", "user.info", "token", "sasl.jaas",
                   "key.pem", "keystore.key", "oauthbearer.config", "credentials", "api.key")


def is_secret(key: str) -> bool:
    """Does this client setting name hold a secret (password, JAAS config, token, ...)?"""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def mask_url(value: Any) -> Any:
    """``scheme://user:password@host/...`` with the user info replaced by ``******``; each URL
    of a comma-separated list."""
    if isinstance(value, str) and "://" in value:
        return ",".join(_mask_one_url(url) for url in value.split(","))
    return value


def _mask_one_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or "@" not in authority:
        return url
    return f"{scheme}://{MASK}@{authority.rsplit('@', 1)[1]}{slash}{path}"


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
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                     BeforeValidator(lambda value: value.upper() if isinstance(value, str)
                                     else value)]
"""A level of Python's logging (any case)."""
LOG_LEVELS: tuple[str, ...] = get_args(get_args(LogLevel)[0])


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
        except SettingsError as exc:  # a value a source (e.g. _Environment) cannot decode
            cause = exc.__cause__
            raise ConfigError(str(cause if isinstance(cause, ConfigError) else exc)) from None

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # the flags and -X come first (added by pydantic-settings), then the environment, then
        # the config file (handed over as init data), then the defaults
        return _Environment(settings_cls), init_settings

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
            flags = vars(parser.parse_args(list(argv)))
        except argparse.ArgumentError as exc:
            raise ConfigError(str(exc)) from None
        path = flags.pop("config")
        client_settings = flags.pop("client_settings", None)
        data = load_config_file(path, cls) if path else {}
        return cls.build(data, client_settings, flags, source)

    @classmethod
    def build(cls, data: Mapping[str, Any] | None = None,
              client_settings: Sequence[str] | None = None,
              flags: Mapping[str, Any] | None = None,
              cli: CliSettingsSource[Any] | None = None) -> Self:
        """Settings from ``data`` (a parsed config file), the environment and the command line:
        ``flags`` (parsed by ``cli``'s parser) and ``-X`` pairs, which win over the
        environment."""
        command_line = dict(flags or {})
        if client_settings and cls.client_settings_field:
            # e.g. "source.options": the CLI source nests dotted names
            command_line[cls.client_settings_field] = json.dumps(parse_pairs(client_settings))
        if cli is None:
            cli = cls.parser(cls.__name__)[1]
        return cls(**dict(data or {}), _cli_settings_source=cli(parsed_args=command_line))

    def masked(self) -> dict[str, Any]:
        """The settings as plain data with secrets masked (for logs and config dumps)."""
        return _masked(self)

    def __repr_args__(self) -> Any:
        return _masked(self).items()


class _Environment(EnvSettingsSource):
    """Environment variables: lists also comma-separated (as in flags and ``.properties``),
    and a value that cannot be decoded is a :class:`ConfigError` naming its variable."""

    def decode_complex_value(self, field_name: str, field: FieldInfo | None,
                             value: Any) -> Any:
        annotation = field.annotation if field is not None else None
        plain_list = _is_list(annotation) and _model_of(annotation) is None
        if plain_list and isinstance(value, str) and not value.lstrip().startswith("["):
            return [item.strip() for item in value.split(",") if item.strip()]
        try:
            return super().decode_complex_value(field_name, field, value)  # type: ignore[arg-type]
        except ValueError as exc:
            expected = "a JSON array or a comma-separated list" if plain_list else "JSON"
            raise ConfigError(f"environment variable {self._variable(field_name, value)}: "
                              f"expected {expected} ({exc})") from None

    def _variable(self, field_name: str, value: str) -> str:
        """The name of the variable that holds ``value`` for ``field_name``."""
        suffix = field_name.lower()
        for name, held in self.env_vars.items():
            if held == value and name.startswith(self.env_prefix.lower()) \
                    and name.endswith(suffix):
                return name.upper()
        return f"{self.env_prefix}{field_name.upper()}"


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


def _is_positional(info: FieldInfo) -> bool:
    """A ``CliPositionalArg`` field (its marker is a class in the field's metadata)."""
    return any("Positional" in getattr(m, "__name__", type(m).__name__) for m in info.metadata)


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
        if not prefix:  # an item of a list of groups: only in the file (or the list's JSON)
            where = "`(file only)`"
        elif _is_positional(info):
            where = f"`(positional)`<br>`{env}`"
        elif key == client_field:
            where = f"`-X key=value`<br>`{env}`"
        elif _is_dict(info.annotation) or group is not None:
            where = f"`(file, or JSON in the variable)`<br>`{env}`"
        else:
            where = f"`--{key.replace('_', '-')}`<br>`{env}`"
        default = info.get_default(call_default_factory=True)
        if info.is_required():
            shown = "required"
        else:
            shown = "" if default in (None, "", [], {}, ()) else f"`{default}`"
        doc = " ".join((info.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{key}` | {where} | {shown} | {doc} |")
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
