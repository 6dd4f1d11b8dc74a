"""Configs of the rag package: corpus, chunker, index, retrieval, reranker, generator, prompt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lorarag.core.config import Strict

# ---------------------------------------------------------------------------------------
# Sub-configs of the rag stages. Each stage receives only its own model.
# ---------------------------------------------------------------------------------------


class CorpusConfig(Strict):
    """Where documents come from and how PDFs are parsed."""

    paths: list[str]
    pdf_parser: Literal["auto", "pypdf", "mineru"] = "auto"
    strict: bool = False  # fail the whole ingest on any bad file
    # A symlink inside the corpus that resolves outside every corpus path is left out (and listed
    # in the ingest report) unless this is true: a link to /etc/passwd is not part of a corpus.
    follow_symlinks_outside: bool = False

    @model_validator(mode="after")
    def _check(self) -> "CorpusConfig":
        # An empty list is a config with no corpus of its own (a run's `data:` names the KB);
        # ingesting it is refused by rag/ingest.py. An empty string is always a mistake.
        if any(not p.strip() for p in self.paths):
            raise ValueError("paths: an empty corpus path")
        return self


class ChunkerConfig(Strict):
    """How documents are cut into chunks (characters, not tokens)."""

    kind: Literal["paragraph", "heading"] = "paragraph"
    chunk_size: int = 500
    chunk_overlap: int = 50

    @model_validator(mode="after")
    def _check(self) -> "ChunkerConfig":
        if self.chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        if not 0 <= self.chunk_overlap < self.chunk_size:
            raise ValueError("chunk_overlap must be >= 0 and < chunk_size")
        return self


class BM25Config(Strict):
    """Sparse retrieval with bm25s; `auto` picks char bigrams for CJK text, words otherwise."""

    tokenizer: Literal["auto", "char_bigram", "word"] = "auto"
    k1: float = 1.5
    b: float = 0.75


class DenseIndexConfig(Strict):
    """Dense index over normalised embeddings (inner product = cosine): FAISS in the index folder
    (`flat`, `hnsw`, `ivf`) or a Milvus collection (`milvus`: rag/index_milvus.py)."""

    kind: Literal["flat", "hnsw", "ivf", "milvus"] = "flat"
    hnsw_m: int = 32
    hnsw_ef_search: int = 64
    ivf_nlist: int = 100
    ivf_nprobe: int = 8
    gpu: Literal["auto", "never", "always"] = "auto"  # GPU index when faiss-gpu and a GPU exist
    # milvus kind: a server (`http://host:19530`) or a Milvus Lite file (`*.db`); None: a Lite file
    # beside the index folder. The token, if any, is read from the environment variable named here.
    milvus_uri: str | None = None
    milvus_token_env: str | None = None
    milvus_collection: str = "lorarag"  # the alias searches go through; each build is `<alias>__<n>`
    milvus_index: Literal["FLAT", "HNSW", "IVF_FLAT"] = "FLAT"

    @model_validator(mode="after")
    def _check_milvus(self) -> "DenseIndexConfig":
        if self.kind != "milvus":
            if self.milvus_uri or self.milvus_token_env:
                raise ValueError("milvus_uri / milvus_token_env are for kind: milvus")
            return self
        uri = self.milvus_uri
        if uri is not None and not (uri.startswith(("http://", "https://", "tcp://")) or uri.endswith(".db")):
            raise ValueError(f"milvus_uri {uri!r}: a server URL (http://host:19530) or a Milvus Lite *.db file")
        if not self.milvus_collection.replace("_", "").isalnum() or self.milvus_collection[0].isdigit():
            raise ValueError("milvus_collection: letters, digits and _, not starting with a digit")
        return self


class EmbedderConfig(Strict):
    """Dense encoder. `transformers` follows the Qwen3-Embedding recipe (last-token pooling,
    instruction on queries only, L2-normalised); `openai` calls a /v1/embeddings endpoint."""

    kind: Literal["transformers", "sentence_transformers", "openai"]
    model: str  # local path or hub id (transformers/ST) or served model name (openai)
    query_instruction: str | None = (
        "Given a web search query, retrieve relevant passages that answer the query")
    batch_size: int = 32
    max_length: int = 512  # tokens
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    base_url: str | None = None  # openai kind: e.g. http://127.0.0.1:8000/v1
    api_key_env: str | None = None  # name of the env var holding the key, never the key
    timeout_s: float = 60.0
    max_retries: int = 3


class IndexConfig(Strict):
    """Where the index lives and which parts it has."""

    dir: str
    bm25: BM25Config | None = BM25Config()
    dense: DenseIndexConfig | None = None  # needs `embedder`
    rrf_k: int = Field(60, ge=0)  # reciprocal-rank fusion constant


class RetrievalConfig(Strict):
    """Two-stage retrieval: top_n candidates from the index, reranked to top_k."""

    mode: Literal["bm25", "dense", "hybrid"] = "bm25"
    top_n: int = Field(20, ge=1)  # candidates from the index
    top_k: int = Field(5, ge=1)  # passages given to the model
    min_score: float | None = Field(None, ge=0.0, le=1.0)  # reranker threshold: a probability of "yes"


class RerankerConfig(Strict):
    """Cross-encoder reranking. `qwen3`: P(yes) at the last position, as Qwen3-Reranker."""

    kind: Literal["qwen3", "cross_encoder"] = "qwen3"
    backend: Literal["transformers", "vllm", "http"] = "transformers"
    model: str
    instruction: str = "Given a web search query, retrieve relevant passages that answer the query"
    batch_size: int = 16
    max_length: int = 1024  # tokens of the whole pair prompt
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 3


class GeneratorConfig(Strict):
    """A chat LM. The adapter (LoRA) is chosen per request by name from `adapters`."""

    kind: Literal["transformers", "vllm", "openai"]
    model: str  # local path / hub id, or the served base-model name (openai)
    adapters: dict[str, str] = {}  # name -> adapter path (transformers/vllm) or served name
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy
    max_model_len: int = 2048  # tokens; prompts longer than this are truncated (see generate.py)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # transformers kind: with a half-precision `dtype`, compute the LM head in fp32 so token
    # probabilities (verdict scores, the NLL gate) do not tie on bf16's 8-bit mantissa; the body
    # keeps the fast half-precision matmuls. (vLLM computes logits in the model dtype.)
    fp32_lm_head: bool = True
    device: str = "cpu"
    batch_size: int = 16
    # transformers kind: also cap each batch's padded size, (longest prompt + new tokens) x rows,
    # in tokens. The KV cache grows with it (Qwen3-4B: ~144 KiB per token in bf16), so 64 rows of
    # 4k-token prompts need ~37 GiB of cache alone; None = `batch_size` rows whatever their length.
    max_batch_tokens: int | None = Field(default=None, ge=1)
    # transformers kind: the attention kernel (transformers' `attn_implementation`); None = its
    # default (SDPA). On CPU, SDPA's flash kernel costs ~8 ms per layer per decode step at batch 32
    # (43 % of a 47-token generation on SmolLM2); `eager` is the plain matmul-softmax-matmul.
    attn_impl: Literal["eager", "sdpa"] | None = None
    # transformers kind: prefill each batch's common leading tokens (system prompt, sources
    # header: ~85 of ~200 tokens of the demo's grounded prompts) once, as one row, and share their
    # keys/values with every row. Same tokens as without it up to half-precision rounding.
    prefix_cache: bool = False
    # transformers kind, greedy only: a request decoded alone (a batch of one row: one client of
    # `serve`) drafts up to this many tokens by matching its last tokens against its own prompt
    # (transformers' prompt-lookup decoding) and the model verifies them in one forward pass. The
    # model still chooses every token, so the text is the same; a step that verifies k drafted
    # tokens reads the weights once instead of k times (a decode step is bound by the weight read:
    # ~86 ms for SmolLM2-135M in fp32 on one shared core). Pays where replies copy the prompt
    # (sources, the forced memory). None = off.
    prompt_lookup: int | None = Field(default=None, ge=1)
    max_lora_rank: int = 64
    chat_template_kwargs: dict[str, bool] = {"enable_thinking": False}
    base_url: str | None = None
    # openai kind: more servers holding the same base model and adapters (vLLM replicas); requests
    # go round-robin over `base_url` and these, `batch_size` in flight per server, and a request
    # whose server fails after its retries is tried once on the next server.
    extra_base_urls: list[str] = []
    api_key_env: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 3
    gpu_memory_utilization: float = 0.85  # vllm only
    extra_engine_args: dict[str, str | int | float | bool] = {}  # vllm only, passed to LLM()

    @model_validator(mode="after")
    def _check(self) -> "GeneratorConfig":
        if self.extra_base_urls and (self.kind != "openai" or not self.base_url):
            raise ValueError("extra_base_urls are for the openai kind, beside its base_url")
        if self.max_batch_tokens is not None and self.kind != "transformers":
            raise ValueError(f"max_batch_tokens is for the transformers kind, not {self.kind} "
                             "(vLLM: extra_engine_args max_num_batched_tokens)")
        if self.prefix_cache and self.kind != "transformers":
            raise ValueError(f"prefix_cache is for the transformers kind, not {self.kind} "
                             "(vLLM: extra_engine_args enable_prefix_caching)")
        if self.prompt_lookup is not None and (self.kind != "transformers" or self.temperature > 0):
            raise ValueError("prompt_lookup is for the transformers kind with greedy decoding (temperature 0)")
        if self.attn_impl is not None and self.kind != "transformers":
            raise ValueError(f"attn_impl is for the transformers kind, not {self.kind} (vLLM picks its own kernels)")
        return self


class PromptConfig(Strict):
    """Grounded-prompt wording; `auto` picks zh/fr/en from the question's script."""

    language: Literal["auto", "zh", "en", "fr"] = "auto"
    system: dict[str, str] = {}  # per-language override of the system prompt
    max_context_chars: int | None = None  # extra cap on the sources block


class RAGConfig(Strict):
    """The whole base pipeline: corpus -> chunks -> index -> retrieve -> rerank -> generate."""

    corpus: CorpusConfig
    chunker: ChunkerConfig = ChunkerConfig()
    index: IndexConfig
    embedder: EmbedderConfig | None = None
    retrieval: RetrievalConfig = RetrievalConfig()
    reranker: RerankerConfig | None = None
    generator: GeneratorConfig | None = None
    prompt: PromptConfig = PromptConfig()

    @model_validator(mode="after")
    def _check(self) -> "RAGConfig":
        if (self.index.dense is not None or self.retrieval.mode != "bm25") and self.embedder is None:
            raise ValueError("dense or hybrid retrieval needs an `embedder`")
        if self.retrieval.mode in ("dense", "hybrid") and self.index.dense is None:
            raise ValueError(f"retrieval.mode={self.retrieval.mode} needs `index.dense`")
        if self.retrieval.mode in ("bm25", "hybrid") and self.index.bm25 is None:
            raise ValueError(f"retrieval.mode={self.retrieval.mode} needs `index.bm25`")
        return self
