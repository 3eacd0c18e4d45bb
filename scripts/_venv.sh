# Shared by scripts/demo and scripts/test: create or reuse the project virtualenv and install
# the package with the given extras. Needs only Python 3.11+ and the package registry.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DEBEZIUM_BRIDGE_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
ensure_venv() {
  local extras="$1"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
  fi
  local stamp="$VENV/.installed-$extras"
  if [ ! -f "$stamp" ] || [ "$ROOT/setup.cfg" -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$extras]"
    touch "$stamp"
  fi
}
