"""Evaluation: the scenario systems and baselines (systems), ItemResult records (records), runner
(resumable), pure metrics (retrieval_metrics, answer_metrics, conflict_metrics, attribution, stats),
the cached LLM judge (judge), paired comparison and headline rows (compare), and reports (report)."""

# Installed as lorarag.eval (pyproject's package-dir): a bare `import eval` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.eval":
    raise ImportError(f"import lorarag.eval, not {__name__}: the folder eval/ is installed as lorarag.eval")
