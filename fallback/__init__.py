"""fallback package."""
