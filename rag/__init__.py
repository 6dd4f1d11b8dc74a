"""rag package."""
