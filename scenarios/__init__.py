"""Scenario and data layer: scenario records, the demo world, scenario generators, importers."""

# Installed as lorarag.scenarios (pyproject's package-dir): a bare `import scenarios` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.scenarios":
    raise ImportError(f"import lorarag.scenarios, not {__name__}: the folder scenarios/ is installed as lorarag.scenarios")
