"""The reader: photo -> decode -> locate -> rectify -> normalise light -> classify marks.

Each stage is a pure function in its own module (``vision.decode``, ``vision.locate``,
``vision.rectify``, ``vision.light``, ``vision.colour``, ``vision.marks``);
``vision.pipeline.read_photo`` chains them. Import the stage you need: this package does not
import them eagerly, so ``import vision`` stays cheap.
"""

__all__ = ["read_photo"]


def read_photo(photo, **kwargs):
    """Read one photo; see :func:`vision.pipeline.read_photo`."""
    from vision.pipeline import read_photo as _read

    return _read(photo, **kwargs)
