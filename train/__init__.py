"""Training: SFT rows from a world or a knowledge base, ms-swift launchers and the CPU peft loop."""

# Installed as lorarag.train (pyproject's package-dir): a bare `import train` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.train":
    raise ImportError(f"import lorarag.train, not {__name__}: the folder train/ is installed as lorarag.train")
