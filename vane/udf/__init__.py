"""What a UDF is (``spec``), the batch contract its output meets (``batch_contract``), and the
per-batch work every actor runs (``runtime``)."""
