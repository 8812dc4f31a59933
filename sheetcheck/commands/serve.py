"""``sheetcheck serve``: run server.py's app with uvicorn."""

from __future__ import annotations


def run(args) -> int:
    import uvicorn

    from server import Settings, create_app

    overrides = {k: v for k, v in {"db": args.db, "api_token": args.token,
                                   "max_upload_mb": args.max_upload_mb,
                                   "workers": args.workers}.items() if v is not None}
    settings = Settings(**overrides)
    print(f"sheetcheck: serving on http://{args.host}:{args.port}/ (audits in {settings.db})")
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info")
    return 0
