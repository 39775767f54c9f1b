"""The DuckDB backend: the one place where plan nodes meet DuckDB.

``binding`` asks DuckDB for a node's schema when the node is built; ``compile`` turns each node
into a lazy DuckDB relation (a source's scan, a step on its inputs' relations), spelling
expressions as DuckDB SQL (``sql``); ``lowering`` does so for a whole plan, with the UDF steps'
streams and the subplans an action keeps. Both runners use it: the local runner for the whole
plan, Ray per block. The plan above holds plain data only.
"""
