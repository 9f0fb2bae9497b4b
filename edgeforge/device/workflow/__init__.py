"""Workflows that combine building and measuring: --precision auto."""
