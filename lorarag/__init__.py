"""lorarag: retrieval-augmented generation with a LoRA-fine-tuned fallback."""

__version__ = "0.1.0"
