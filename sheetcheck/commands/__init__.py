"""One module per subcommand, each with ``run(args) -> int`` (see sheetcheck/cli.py)."""
