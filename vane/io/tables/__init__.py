"""Table formats: Lance, Iceberg and Delta Lake, read and written through each format's own
library, so that a write commits through the format's own transaction and every engine that
reads the format sees all of it or none.

A table is read as a ``TableSource`` (``base.py``): a small description of one version of the
table (pinned when the relation is built, so every action reads the same rows) that opens, for
each action, a fresh ``pyarrow.dataset.Dataset`` (Lance, Delta: DuckDB pushes the columns and
filters it needs into the format's scanner) or a ``RecordBatchReader`` (Iceberg: columns and
``row_filter`` are given to pyiceberg's scan, which prunes files by their statistics).

A table is written by a ``TableSink`` with the file sinks' lifecycle (``start`` / ``write`` ->
parts / ``commit`` / ``abort``): the rows stream into the format's writer as a
``RecordBatchReader``; nothing is gathered in memory. Each module says what its commit is.
"""
