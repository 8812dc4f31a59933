"""A script of scripts/ loaded as a module (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str, *, register: bool = False) -> ModuleType:
    """``scripts/NAME.py`` as a module named ``name`` (run afresh on every call); with
    ``register``, entered in ``sys.modules`` under that name before it runs (a script whose
    worker processes must find its functions again by name, as make_corpus.py's do)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
