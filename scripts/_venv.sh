# Shared by scripts/demo and scripts/test: create or reuse the project virtualenv and install
# the package with the given extras. Needs only Python 3.11+ and the package registry.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DEBEZIUM_BRIDGE_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
# The native core (debezium_bridge/native) is built by cargo during the install; keep its build
# cache outside the tree so repeated installs (and CI runs on a machine that keeps ~/.cache)
# only rebuild what changed.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/debezium-bridge/cargo-target}"
ensure_venv() {
  local extras="$1"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
  fi
  local stamp="$VENV/.installed-$extras"
  local crate_changed=""
  if [ -f "$stamp" ]; then
    crate_changed="$(find "$ROOT/debezium_bridge/native" "$ROOT/pyproject.toml" -newer "$stamp" \
      -type f -not -path '*/target/*' -print -quit 2>/dev/null)"
  fi
  if [ ! -f "$stamp" ] || [ "$ROOT/setup.cfg" -nt "$stamp" ] || [ -n "$crate_changed" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$extras]"
    touch "$stamp"
  fi
}
