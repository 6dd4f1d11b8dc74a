"""Tiny local Qwen3 models for fast mechanics tests: no download, built in seconds.

A byte-level BPE tokenizer is trained with `tokenizers` on a small built-in multilingual text
(special tokens `<|im_start|>`, `<|im_end|>`, `<|endoftext|>`; `<think>`/`</think>` added as
non-special tokens, as in Qwen3) and wrapped with a Qwen3-style chat template that honours
`enable_thinking=False`. Models are random-init `Qwen3ForCausalLM` from a `Qwen3Config`
(head_dim 32: vLLM's CPU attention rejects smaller), saved as safetensors. The same causal-LM
architecture serves as embedding model (last-token pooling, as Qwen3-Embedding) and as
reranker (P("yes") at the last position, as Qwen3-Reranker).

These models produce noise, not answers: they test that every backend runs the same code
path and agrees, never answer quality (the CPU demo uses SmolLM2 for that).
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]

# Qwen3's chat template, reduced to what we use (system/user/assistant, no tools), with the
# same rendering: an empty think block is inserted when enable_thinking is False.
# Like Qwen3, a final assistant turn (a reply being continued, vLLM's continue_final_message)
# gets the empty think block before its content.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' and loop.last %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_TRAIN_TEXT = """
The quick brown fox jumps over the lazy dog. Answer yes or no. yes no yes no Yes No.
Judge whether the Document meets the requirements based on the Query and the Instruct provided.
Note that the answer can only be "yes" or "no". <Instruct>: <Query>: <Document>:
Given a web search query, retrieve relevant passages that answer the query.
Question: What is the capital of France? Answer: Paris. Sources: [S1] [S2] [S3] [S4] [S5]
The company reported a net profit of 12.5 million dollars in 2023. The CEO is Alice Martin.
Headquarters: Berlin. Latest version 4.2 released on 2024-05-01. Founded in 1998.
verdict: supported conflicting outdated irrelevant insufficient memory: source: answer: unknown
La société a son siège à Lyon. Quelle est la capitale de la France ? Réponse : Paris. été élève
机动车所有人应当向住所地的公安机关交通管理部门申请注册登记。第五条 第二章 车辆和驾驶人 第一节 机动车
初次申领机动车号牌、行驶证的，应当向哪个部门申请？驾驶人 交通事故 道路 安全 法律 规定 罚款 元
0 1 2 3 4 5 6 7 8 9 10 100 2020 2021 2022 2023 2024 2025 , . ; : ! ? ( ) [ ] - _ / "
"""


def build_tokenizer(out_dir: str | Path, vocab_size: int = 1024):
    """Train a byte-level BPE tokenizer and save it as a Qwen3-style fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_TRAIN_TEXT] * 50, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    fast.add_tokens(THINK_TOKENS, special_tokens=False)
    fast.chat_template = QWEN3_CHAT_TEMPLATE
    for word in ("yes", "no"):
        ids = fast.encode(word, add_special_tokens=False)
        if len(ids) != 1:  # the reranker reads one token each for "yes" and "no"
            raise RuntimeError(f"tiny tokenizer splits {word!r} into {len(ids)} tokens")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    return fast


def build_causal_lm(
    out_dir: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    max_position_embeddings: int = 2048,
) -> Path:
    """Build a random tiny Qwen3ForCausalLM with its tokenizer in `out_dir` (safetensors)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    tok = build_tokenizer(out)
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=2 * hidden_size,
        tie_word_embeddings=True,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    # Larger-than-default init so that different inputs give clearly different outputs
    # (greedy ties between backends would make agreement tests flaky).
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    # Like Qwen3's generation_config.json: generation stops at <|im_end|> or <|endoftext|>.
    model.generation_config = GenerationConfig(
        eos_token_id=[config.eos_token_id, tok.pad_token_id], pad_token_id=config.pad_token_id, do_sample=False
    )
    model.save_pretrained(out, safe_serialization=True)
    return out


def build_embedding_model(out_dir: str | Path, *, seed: int = 1) -> Path:
    """A tiny Qwen3 checkpoint used as an embedding model (last-token pooling)."""
    return build_causal_lm(out_dir, seed=seed)


def build_reranker(out_dir: str | Path, *, seed: int = 2) -> Path:
    """A tiny Qwen3 checkpoint used as a Qwen3-Reranker-style yes/no scorer."""
    return build_causal_lm(out_dir, seed=seed)


def build_all(root: str | Path) -> dict[str, Path]:
    """Build the three tiny models under `root`; returns {"lm", "embedder", "reranker"}."""
    root = Path(root)
    return {
        "lm": build_causal_lm(root / "lm"),
        "embedder": build_embedding_model(root / "embedder"),
        "reranker": build_reranker(root / "reranker"),
    }
