"""Evaluation: ItemResult records (records), runner (resumable), pure metrics (retrieval_metrics,
answer_metrics, conflict_metrics, attribution, stats), the cached LLM judge (judge), paired
comparison and headline rows (compare), and reports (report). Write `from eval import metrics`-style
imports (`from eval.records import ItemResult`), never `import eval`."""
