"""Shared core below every layer: config base and loading, errors, run provenance."""
