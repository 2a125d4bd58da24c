"""``python -m toolrelay``."""

from __future__ import annotations

from toolrelay.cli import main

raise SystemExit(main())
