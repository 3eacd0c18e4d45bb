"""An in-memory Confluent Schema Registry on the standard library, for tests.

:class:`SchemaRegistryServer` answers the REST calls confluent-kafka's ``SchemaRegistryClient``
makes (register, look up, fetch by id, subjects and versions, global config) on
``127.0.0.1:<free port>`` from a daemon thread, optionally behind HTTP basic auth. Its
:meth:`~SchemaRegistryServer.register` is a :data:`~debezium_bridge.formats.debezium.encode.
SchemaRegistrar`, so sample traffic can be produced with ids the server knows::

    with SchemaRegistryServer(credentials=("user", "pass")) as registry:
        records, expected = demo("avro", registrar=registry.register)
        main(["convert", dump, "--schema-registry", registry.url,
              "-X", "basic.auth.user.info=user:pass"])

Pytest fixtures: ``schema_registry_server`` (the server, no auth) and ``schema_registry`` (its
URL). Import ``schema_registry_fixture, schema_registry_server_fixture`` (the function names
differ from the fixture names, so ruff sees no redefinition) or list
``"tests.support.registry"`` in a root ``conftest.py``'s ``pytest_plugins``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

# Confluent error codes (io.confluent.kafka.schemaregistry.rest.exceptions.Errors)
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
COMPATIBILITY_LEVELS = frozenset({"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD",
                                  "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"})


class RegistryError(Exception):
    """An error answer: HTTP status, Confluent ``error_code`` and message."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


def _canonical(schema: Any) -> tuple[str, str]:
    """(text as stored, identity) of a schema given as an object or as JSON text."""
    if isinstance(schema, str):
        try:
            parsed = json.loads(schema)
        except ValueError as exc:
            raise RegistryError(422, INVALID_SCHEMA, f"Invalid schema: {exc}") from None
        text = schema
    else:
        parsed = schema
        text = json.dumps(schema, separators=(",", ":"))
    return text, json.dumps(parsed, sort_keys=True, separators=(",", ":"))


class SchemaRegistryServer:
    """In-memory Schema Registry over HTTP (see the module docstring).

    Schema ids are global (the same schema under two subjects has one id); a subject's versions
    are 1, 2, ... in registration order, and re-registering a schema returns its existing id.
    ``credentials`` turns on basic auth (401 without or with wrong credentials); it may be
    changed while the server runs. ``requests`` logs ``(method, path)`` of every request.
    """

    def __init__(self, *, credentials: tuple[str, str] | None = None,
                 compatibility: str = "BACKWARD") -> None:
        self.credentials = credentials
        self.compatibility = compatibility
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str]] = []
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the schema registry is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SchemaRegistryServer:
        if self._httpd is not None:
            return self
        handler = type("Handler", (_Handler,), {"registry": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="schema-registry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the registry ---------------------------------------------------------------------
    def register(self, subject: str, schema: Any) -> int:
        """Register ``schema`` (object or JSON text) under ``subject``; returns its id.

        Usable directly as a ``SchemaRegistrar`` (no HTTP, no auth).
        """
        text, identity = _canonical(schema)
        with self._lock:
            schema_id = self._ids.get(identity)
            if schema_id is None:
                schema_id = self._ids[identity] = len(self._ids) + 1
                self.schemas[schema_id] = text
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    __call__ = register

    def schema_text(self, schema_id: int) -> str:
        with self._lock:
            text = self.schemas.get(schema_id)
        if text is None:
            raise RegistryError(404, SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
        return text

    def _versions(self, subject: str) -> list[int]:
        with self._lock:
            versions = self.subjects.get(subject)
            if not versions:
                raise RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
            return list(versions)

    def version(self, subject: str, version: str) -> dict[str, Any]:
        versions = self._versions(subject)
        if version in ("latest", "-1"):
            number = len(versions)
        else:
            try:
                number = int(version)
            except ValueError:
                raise RegistryError(422, INVALID_VERSION,
                                    f"The specified version '{version}' is not a valid version "
                                    "id.") from None
            if not 1 <= number <= len(versions):
                raise RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found.")
        schema_id = versions[number - 1]
        return {"subject": subject, "version": number, "id": schema_id,
                "schema": self.schema_text(schema_id)}

    def lookup(self, subject: str, schema: Any) -> dict[str, Any]:
        versions = self._versions(subject)
        _, identity = _canonical(schema)
        with self._lock:
            schema_id = self._ids.get(identity)
        if schema_id is None or schema_id not in versions:
            raise RegistryError(404, SCHEMA_NOT_FOUND, "Schema not found")
        return {"subject": subject, "version": versions.index(schema_id) + 1, "id": schema_id,
                "schema": self.schema_text(schema_id)}


_VERSION = re.compile(r"^/subjects/(?P<subject>[^/]+)/versions/(?P<version>[^/]+)$")
_VERSIONS = re.compile(r"^/subjects/(?P<subject>[^/]+)/versions$")
_SUBJECT = re.compile(r"^/subjects/(?P<subject>[^/]+)$")
_BY_ID = re.compile(r"^/schemas/ids/(?P<id>\d+)(?P<rest>/subjects|/versions)?$")
_CONFIG = re.compile(r"^/config(?:/(?P<subject>[^/]+))?$")


class _Handler(BaseHTTPRequestHandler):
    registry: SchemaRegistryServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        expected = self.registry.credentials
        if expected is None:
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return (user, password) == expected

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise RegistryError(400, 400, "Unrecognized request body") from None

    def _handle(self, method: str) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        self.registry.requests.append((method, path))
        body = self._body() if method in ("POST", "PUT") else None
        if not self._authorized():
            self._send(401, {"error_code": 401, "message": "Unauthorized"},
                       {"WWW-Authenticate": 'Basic realm="schema-registry"'})
            return
        try:
            status, answer = 200, self._route(method, path, body)
        except RegistryError as exc:
            status, answer = exc.status, {"error_code": exc.error_code, "message": exc.message}
        self._send(status, answer)

    def _route(self, method: str, path: str, body: Any) -> Any:
        registry = self.registry
        if method == "GET" and (m := _BY_ID.match(path)):
            schema_id = int(m["id"])
            text = registry.schema_text(schema_id)
            if m["rest"] is None:
                return {"schema": text}
            with registry._lock:
                pairs = [(s, v.index(schema_id) + 1) for s, v in registry.subjects.items()
                         if schema_id in v]
            if m["rest"] == "/subjects":
                return [s for s, _ in pairs]
            return [{"subject": s, "version": v} for s, v in pairs]
        if method == "GET" and path == "/subjects":
            with registry._lock:
                return sorted(registry.subjects)
        if method == "GET" and path == "/schemas/types":
            return ["AVRO"]
        if m := _VERSIONS.match(path):
            subject = unquote(m["subject"])
            if method == "GET":
                return list(range(1, len(registry._versions(subject)) + 1))
            if method == "POST":
                return {"id": registry.register(subject, self._schema_of(body))}
        if method == "GET" and (m := _VERSION.match(path)):
            return registry.version(unquote(m["subject"]), m["version"])
        if method == "POST" and (m := _SUBJECT.match(path)):
            return registry.lookup(unquote(m["subject"]), self._schema_of(body))
        if m := _CONFIG.match(path):
            if method == "GET":
                return {"compatibilityLevel": registry.compatibility}
            if method == "PUT":
                level = str((body or {}).get("compatibility", "")).upper()
                if level not in COMPATIBILITY_LEVELS:
                    raise RegistryError(422, INVALID_COMPATIBILITY_LEVEL,
                                        "Invalid compatibility level")
                if m["subject"] is None:
                    registry.compatibility = level
                return {"compatibility": level}
        raise RegistryError(404, 404, f"HTTP 404 Not Found: {method} {path}")

    @staticmethod
    def _schema_of(body: Any) -> str:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise RegistryError(422, INVALID_SCHEMA, "Invalid schema: missing 'schema'")
        if body.get("schemaType", "AVRO") != "AVRO" or body.get("references"):
            raise RegistryError(422, INVALID_SCHEMA, "only AVRO schemas without references")
        return str(body["schema"])

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")


@pytest.fixture(name="schema_registry_server")
def schema_registry_server_fixture() -> Iterator[SchemaRegistryServer]:
    """A running :class:`SchemaRegistryServer` without auth."""
    with SchemaRegistryServer() as server:
        yield server


@pytest.fixture(name="schema_registry")
def schema_registry_fixture(schema_registry_server: SchemaRegistryServer) -> str:
    """The URL of a running in-memory schema registry (``schema_registry_server``)."""
    return schema_registry_server.url
