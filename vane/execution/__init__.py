"""Runners: where and how a logical plan executes."""
