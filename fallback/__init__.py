"""The LoRA fallback: verdicts, the self-knowledge gate, the routing policy, the LoRA-RAG system."""

# Installed as lorarag.fallback (pyproject's package-dir): a bare `import fallback` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.fallback":
    raise ImportError(f"import lorarag.fallback, not {__name__}: the folder fallback/ is installed as lorarag.fallback")
