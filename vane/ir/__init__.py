"""The expression IR: what a step computes per row (``expr``), the literals it may hold
(``literals``) and user SQL text read into it (``parse``). It sits below ``udf/`` and
``plan/``: a column UDF's call builds an expression, and plan steps hold expressions."""
