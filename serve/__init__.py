"""Serving a trained system: an OpenAI-compatible HTTP API with dynamic batching (serve/app.py)."""
