"""The `vllm` generator kind: an offline vLLM `LLM` engine; adapters through `LoRARequest`."""

from __future__ import annotations

import logging

from lorarag.rag.config import GeneratorConfig
from lorarag.rag.generators.base import Generation, LocalTemplate, Message, check_model_source, generation_eos
from lorarag.rag.generators.vllm_compat import engine_start

log = logging.getLogger(__name__)


class VLLMGenerator(LocalTemplate):
    """Offline vLLM engine; LoRA adapters through LoRARequest."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        check_model_source(cfg)  # before vLLM starts an engine on a path that is not there
        from vllm import LLM

        self.cfg = cfg
        args = dict(
            model=cfg.model,
            dtype=cfg.dtype,
            max_model_len=cfg.max_model_len,
            max_num_seqs=cfg.batch_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_logprobs=20,
        )
        if cfg.device == "cpu":
            args.pop("gpu_memory_utilization")
            args["enforce_eager"] = True
        if cfg.adapters:
            args.update(enable_lora=True, max_lora_rank=cfg.max_lora_rank, max_loras=len(cfg.adapters))
        args.update(cfg.extra_engine_args)

        with engine_start():
            self.llm = LLM(**args)
        self.tokenizer = self.llm.get_tokenizer()
        self._stop_ids = [self.tokenizer.eos_token_id, *generation_eos(cfg.model)]
        self._lora = {}
        for n, (name, path) in enumerate(cfg.adapters.items(), 1):
            from vllm.lora.request import LoRARequest

            self._lora[name] = LoRARequest(name, n, path)

    def generate(
        self,
        conversations: list[list[Message]],
        *,
        adapter: str | None = None,
        max_new_tokens: int | None = None,
        top_logprobs: int = 0,
        prefixes: list[str] | None = None,
    ) -> list[Generation]:
        """One engine call for the whole batch (vLLM schedules it continuously)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        max_new, encoded = self._encode_all(conversations, adapter, prefixes, max_new_tokens)
        params = SamplingParams(
            temperature=self.cfg.temperature,
            max_tokens=max_new,
            logprobs=max(top_logprobs, 1),
            stop_token_ids=self._stop_ids,
            skip_special_tokens=True,
        )
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=ids) for ids, _, _ in encoded],
            params,
            use_tqdm=False,
            lora_request=self._lora.get(adapter) if adapter else None,
        )
        gens = []
        for out, (_, text, cut) in zip(outs, encoded):
            o = out.outputs[0]
            kept, _ = self._strip_stop(list(o.token_ids))  # vLLM may keep the stop id
            steps = (o.logprobs or [])[: len(kept)]
            lp = tuple(float(step[i].logprob) for step, i in zip(steps, kept))
            tops: tuple = ()
            if top_logprobs:
                tops = tuple(
                    tuple(
                        (self._tok_str(i, kept[:t]), float(v.logprob))
                        for i, v in sorted(step.items(), key=lambda kv: -kv[1].logprob)[:top_logprobs]
                    )
                    for t, step in enumerate(steps)
                )
            gens.append(
                Generation(
                    text=self._text(kept),
                    tokens=self._token_strs(kept),
                    logprobs=lp,
                    top_logprobs=tops,
                    finish_reason="length" if o.finish_reason == "length" else "stop",
                    truncated_prompt=cut,
                    prompt=text,
                )
            )
        return gens

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        import gc

        llm, self.llm = self.llm, None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            core = getattr(engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            del llm
            gc.collect()
