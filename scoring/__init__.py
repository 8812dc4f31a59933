"""Pure rules engines, one module per game, listed in an explicit registry (scoring.registry)."""
