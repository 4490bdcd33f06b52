"""Where kiln finds its own data (templates, playbooks) in a checkout or an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_CHECKOUT_ROOT = _PACKAGE_DIR.parent.parent


def _data_dir(name: str) -> Path:
    installed = _PACKAGE_DIR / "_data" / name
    if installed.is_dir():
        return installed
    return _CHECKOUT_ROOT / name


TEMPLATES_DIR = _data_dir("templates")
PLAYBOOKS_DIR = _data_dir("playbooks")
PROFILES_DIR = _PACKAGE_DIR / "profiles"
