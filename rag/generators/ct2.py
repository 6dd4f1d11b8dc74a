"""The `ctranslate2` generator kind: CTranslate2's C++ decoder on a converted copy of the model.

CTranslate2 has no LoRA at run time, so each adapter is merged into a copy of the base (peft
`merge_and_unload`) and that copy is converted; `adapter=None` runs the converted base. The
copies live under `engine_dir`, one folder per (base weights, adapter weights, compute type,
CTranslate2 version), named by the sha256 of all four: a retrained adapter gets a new folder and
is never read from a stale one. A folder is written beside its final name and renamed into place
when whole, so an interrupted conversion leaves nothing that would be reused.

Every generated position's full-vocabulary log-softmax comes back (`return_logits_vocab`), so the
reply's token logprobs (the closed-book NLL the gate reads) and the top-k (the verdict's label
probabilities) are read as the transformers kind reads them; tests/test_engine_agree.py holds the
two to the same tolerance.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Generation, LocalTemplate, Message, check_model_source, generation_eos, load_error

log = logging.getLogger(__name__)

WEIGHTS = ("model.safetensors", "adapter_model.safetensors")


def _weights_sha(folder: Path) -> str:
    """sha256 over a model or adapter folder's safetensors files (config files included: a
    changed rank or target list is another adapter)."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".json") and p.is_file())
    if not any(p.name in WEIGHTS or p.name.startswith("model-") for p in files):
        raise FileNotFoundError(f"{folder}: no safetensors weights")
    for p in files:
        h.update(p.name.encode())
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def engine_folder(cfg: GeneratorConfig, adapter_path: str | None) -> Path:
    """Where the converted copy of the base (+ adapter) lives: named by what produced it."""
    import ctranslate2

    h = hashlib.sha256()
    for part in (
        _weights_sha(Path(cfg.model)),
        _weights_sha(Path(adapter_path)) if adapter_path else "-",
        cfg.dtype,
        ctranslate2.__version__,
    ):
        h.update(part.encode() + b"\0")
    return Path(cfg.engine_dir) / f"ct2-{h.hexdigest()[:16]}"


def convert(cfg: GeneratorConfig, adapter_path: str | None) -> Path:
    """The converted copy (made on first use; merged with the adapter when one is given)."""
    import torch
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = engine_folder(cfg, adapter_path)
    if (out / "model.bin").is_file():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info(
        "converting %s%s to CTranslate2 (%s) in %s", cfg.model, f" + {adapter_path}" if adapter_path else "", cfg.dtype, out
    )
    src = cfg.model
    if adapter_path:  # merged in fp32, saved as safetensors, then converted like any model folder
        from peft import PeftModel

        merged = tmp.with_name(tmp.name + "-merged")
        model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32)
        model = PeftModel.from_pretrained(model, adapter_path).merge_and_unload()
        model.save_pretrained(merged, safe_serialization=True)
        AutoTokenizer.from_pretrained(cfg.model).save_pretrained(merged)
        src = str(merged)
    try:
        TransformersConverter(src, load_as_float16=False).convert(str(tmp), quantization=cfg.dtype, force=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if adapter_path:
            shutil.rmtree(merged, ignore_errors=True)
    return out


class CT2Generator(LocalTemplate):
    """CTranslate2 engines: the base and one merged copy per adapter, chosen per request."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        check_model_source(cfg)
        import ctranslate2
        from transformers import AutoTokenizer

        self.cfg = cfg
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
            folders = {None: convert(cfg, None), **{n: convert(cfg, p) for n, p in cfg.adapters.items()}}
        except (OSError, ValueError) as exc:  # not a model folder, or weights the converter cannot read
            raise load_error(cfg, exc) from None
        threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)  # the run's pinned thread count, if any
        device = "cuda" if cfg.device.startswith("cuda") else "cpu"
        self._engines = {
            name: ctranslate2.Generator(str(f), device=device, compute_type=cfg.dtype, intra_threads=threads)
            for name, f in folders.items()
        }
        self._stop_ids = [*generation_eos(cfg.model), self.tokenizer.eos_token_id]

    def generate(
        self,
        conversations: list[list[Message]],
        *,
        adapter: str | None = None,
        max_new_tokens: int | None = None,
        top_logprobs: int = 0,
        prefixes: list[str] | None = None,
    ) -> list[Generation]:
        """One completion per conversation, in batches of `cfg.batch_size` prompts of similar length."""
        max_new, encoded = self._encode_all(conversations, adapter, prefixes, max_new_tokens)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
        out: dict[int, Generation] = {}
        for s in range(0, len(order), self.cfg.batch_size):
            part = order[s : s + self.cfg.batch_size]
            out.update(zip(part, self._batch([encoded[i] for i in part], adapter, max_new, top_logprobs)))
        return [out[i] for i in range(len(encoded))]

    def _batch(self, encoded, adapter, max_new, k) -> list[Generation]:
        import numpy as np

        tok = self.tokenizer
        sampling = (
            {"sampling_topk": 1}
            if self.cfg.temperature == 0
            else {"sampling_topk": 0, "sampling_temperature": self.cfg.temperature}
        )
        results = self._engines[adapter].generate_batch(
            [tok.convert_ids_to_tokens(ids) for ids, _, _ in encoded],
            max_length=max_new,
            include_prompt_in_result=False,
            return_logits_vocab=True,
            return_end_token=True,
            end_token=sorted(set(self._stop_ids)),
            **sampling,
        )
        gens = []
        for res, (_, text, cut) in zip(results, encoded):
            kept, reason = self._strip_stop(list(res.sequences_ids[0]))
            lps, tops = [], []
            # a prompt longer than the batch's shortest is walked token by token before generation, and
            # those positions' logits come first: the generated positions are the last ones
            steps = res.logits[0][len(res.logits[0]) - len(res.sequences_ids[0]) :]
            for t, step in enumerate(steps[: len(kept)]):
                x = np.asarray(step, dtype=np.float64)
                x = x - x.max()
                x = x - np.log(np.exp(x).sum())  # log-softmax in float64 (CTranslate2 returns logits)
                lps.append(float(x[kept[t]]))
                if k:
                    best = np.argsort(-x, kind="stable")[:k]
                    tops.append(tuple((self._tok_str(int(i), kept[:t]), float(x[i])) for i in best))
            gens.append(
                Generation(
                    text=self._text(kept),
                    tokens=self._token_strs(kept),
                    logprobs=tuple(lps),
                    top_logprobs=tuple(tops),
                    finish_reason=reason,
                    truncated_prompt=cut,
                    prompt=text,
                )
            )
        return gens

    def close(self) -> None:
        """Free the engines' memory."""
        self._engines = {}
