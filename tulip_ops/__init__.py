"""Operator-facing commands: ``tulip-memory`` (cli), the dev stack, the reindex command."""
