"""What is built from a sheet model alone, built once per model object and kept while it lives.

The classifier's constants (``vision.marks._model_constants``), the ring geometry
(``vision._evidence.ring_geometry``) and the guide geometry (``vision._guide.guide_geometry``)
depend on nothing but the sheet model. Each is built on first use and held beside a weak
reference to its model: a model dropped from the pipeline's cache takes what was built from it
along.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

#: re-entrant: a build may itself use per_model (on the same thread) without a deadlock
_lock = threading.RLock()
#: (id of the model, what was built) -> (weak reference to the model, the value)
_store: dict[tuple[int, str], tuple[weakref.ref, Any]] = {}


def per_model(model, what: str, build: Callable[[Any], Any]):
    """``build(model)``, once per model object and ``what`` (under a lock: two threads never
    build it twice), kept while the model lives. ``build`` may call ``per_model`` for what it
    is built from."""
    key = (id(model), what)
    with _lock:
        hit = _store.get(key)
        if hit is not None and hit[0]() is model:
            return hit[1]
        value = build(model)
        _store[key] = (weakref.ref(model, lambda _, key=key: _store.pop(key, None)), value)
        return value


__all__ = ["per_model"]
