"""``python -m debezium_bridge`` runs the command line."""

import sys

from debezium_bridge.cli import main

sys.exit(main())
