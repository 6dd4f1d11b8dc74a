"""Shared core below every layer: config base and loading, errors, run provenance."""

# Installed as lorarag.core (pyproject's package-dir): a bare `import core` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.core":
    raise ImportError(f"import lorarag.core, not {__name__}: the folder core/ is installed as lorarag.core")
