"""Generators: one batch-first chat interface (`base.Generator`) over several backends, chosen by `kind:`.

- `base.py`: the interface and its records (Message, Generation), request checks shared by every backend;
- `registry.py`: `build_generator(cfg)`, `kind:` -> backend, wrapped in `memo.py` (greedy answers remembered);
- backends: `hf.py` (transformers + peft adapters), `vllm_offline.py` (a vLLM engine), `ct2.py`
  (CTranslate2), `openai_api.py` (any OpenAI-compatible server, through `http.py`);
- `agreement.py`: greedy agreement across backends (`lorarag check-backends`).
Each backend imports its heavy library only when it is built.
"""

from lorarag.rag.generators.base import Generation, Generator, Message
from lorarag.rag.generators.registry import build_generator

__all__ = ["Generation", "Generator", "Message", "build_generator"]
