"""``python -m toolrelay.cli``."""

from __future__ import annotations

from toolrelay.cli import main

raise SystemExit(main())
