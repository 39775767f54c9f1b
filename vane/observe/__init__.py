"""Observability: the executor emits events; progress display and run summaries subscribe."""
