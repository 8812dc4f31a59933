"""Batch audits: many photos -> a resumable SQLite store, results.csv/json and index.html.

``inputs`` finds the photos (folders, zips read safely, a manifest), ``runner`` checks them in
parallel (processes or a Dask cluster), ``store`` keeps every result append-only, ``export`` and
``html`` write the report folder.
"""
