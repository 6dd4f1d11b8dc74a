"""The trained system, the product a run leaves: its config, adapters, components, and `load_run`.

- `config.py`: the run config (`configs/run/*.yaml`, a run folder's config.yaml);
- `adapters.py`: the run's trained adapters, found and checked (recipe, base model);
- `components.py`: generator, RAG system and contexts, built once and shared by every system;
- `contexts.py`: the context a scenario system sees (poisoned retrieval or presented chunks);
- `load.py`: a run folder -> a ready AdvancedRAGSystem (`lorarag.load_run`, `ask --run`, `serve`).
It sits below the study: `ask`, `serve` and `load_run` import nothing from study/.
"""

# Installed as lorarag.trained (pyproject's package-dir): a bare `import trained` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.trained":
    raise ImportError(f"import lorarag.trained, not {__name__}: the folder trained/ is installed as lorarag.trained")
