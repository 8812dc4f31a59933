"""sheetcheck: read photographed roll-and-write score sheets and audit them."""

__version__ = "0.1.0"
