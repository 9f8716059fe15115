"""Location of the read-only shared corpora (never copied into the project)."""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "KT_SHARED_DATA"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """Return ``$KT_SHARED_DATA``, or ``../shared/data`` relative to the project root.

    The directory may not exist; callers check and skip or fail with their own message.
    """
    configured = os.environ.get(ENV_VAR)
    return Path(configured) if configured else _PROJECT_ROOT.parent / "shared" / "data"
