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

    paths: list[str] = Field(
        description=("files or folders of the corpus ([] in a run config with `data:`, whose data.corpus is the KB)")
    )
    pdf_parser: Literal["auto", "pypdf", "mineru"] = Field(
        "auto", description=("PDF reader: `pypdf`, the `mineru` CLI, or `auto` (mineru when on PATH, else pypdf)")
    )
    strict: bool = Field(
        False, description=("fail the whole ingest on any bad file (else it is left out and listed in the ingest report)")
    )
    follow_symlinks_outside: bool = Field(
        False,
        description=(
            "A symlink inside the corpus that resolves outside every corpus path is left out (and listed in the "
            "ingest report) unless this is true: a link to /etc/passwd is not part of a corpus."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> CorpusConfig:
        # An empty list is a config with no corpus of its own (a run's `data:` names the KB);
        # ingesting it is refused by rag/ingest/parse.py. An empty string is always a mistake.
        if any(not p.strip() for p in self.paths):
            raise ValueError("paths: an empty corpus path")
        return self


class ChunkerConfig(Strict):
    """How documents are cut into chunks (characters, not tokens)."""

    kind: Literal["paragraph", "heading"] = Field(
        "paragraph",
        description=(
            "`paragraph`: blank-line paragraphs merged up to chunk_size; `heading`: one chunk per Markdown section, "
            "with its heading path (rag/ingest/chunk.py)"
        ),
    )
    chunk_size: int = Field(
        500, description=("largest chunk, in characters (code points); longer paragraphs are split in windows")
    )
    chunk_overlap: int = Field(
        50, description=("characters repeated from the end of one chunk at the start of the next (>= 0, < chunk_size)")
    )

    @model_validator(mode="after")
    def _check(self) -> ChunkerConfig:
        if self.chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        if not 0 <= self.chunk_overlap < self.chunk_size:
            raise ValueError("chunk_overlap must be >= 0 and < chunk_size")
        return self


class BM25Config(Strict):
    """Sparse retrieval with bm25s; `auto` picks char bigrams for CJK text, words otherwise."""

    tokenizer: Literal["auto", "char_bigram", "word"] = Field(
        "auto", description=("`char_bigram` (CJK), `word`, or `auto`: char bigrams for CJK text, words otherwise")
    )
    k1: float = Field(1.5, description="BM25 term-frequency saturation (bm25s `k1`)")
    b: float = Field(0.75, description="BM25 document-length normalisation (bm25s `b`)")


class DenseIndexConfig(Strict):
    """Dense index over normalised embeddings (inner product = cosine): FAISS in the index folder
    (`flat`, `hnsw`, `ivf`) or a Milvus collection (`milvus`: rag/index/milvus.py)."""

    kind: Literal["flat", "hnsw", "ivf", "milvus"] = Field(
        "flat", description=("FAISS `flat` (exact), `hnsw` or `ivf` in the index folder, or a `milvus` collection")
    )
    hnsw_m: int = Field(32, description="hnsw kind: neighbours per node (FAISS HNSW M)")
    hnsw_ef_search: int = Field(64, description="hnsw kind: search breadth (FAISS efSearch)")
    ivf_nlist: int = Field(100, description="ivf kind: number of clusters (FAISS nlist)")
    ivf_nprobe: int = Field(8, description="ivf kind: clusters searched per query (FAISS nprobe)")
    gpu: Literal["auto", "never", "always"] = Field(
        "auto", description=("`auto`: a GPU index when faiss-gpu and a GPU exist; `never`; `always`")
    )
    milvus_uri: str | None = Field(
        None,
        description=(
            "milvus kind: a server (`http://host:19530`) or a Milvus Lite file (`*.db`); null: a Lite file beside the "
            "index folder"
        ),
    )
    milvus_token_env: str | None = Field(
        None, description=("milvus kind: name of the environment variable holding the server token, never the token")
    )
    milvus_collection: str = Field(
        "lorarag", description=("milvus kind: the alias searches go through; each build is `<alias>__<n>`")
    )
    milvus_index: Literal["FLAT", "HNSW", "IVF_FLAT"] = Field(
        "FLAT", description=("milvus kind: the collection's index type")
    )

    @model_validator(mode="after")
    def _check_milvus(self) -> DenseIndexConfig:
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


class ModelPlacement(Strict):
    """Where a model runs, the fields the embedder, reranker and generator share: in this process
    (`dtype`, `device`) or on a server (`base_url` and the request settings), as each one's kind says."""

    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description=(
            "weights' precision; `auto` in a config file: bfloat16 on a GPU or a CPU with native bf16 (AVX512-BF16, "
            "AMX), else float32 (core/precision.py)"
        ),
    )
    device: str = Field("cpu", description="torch device (`cpu`, `cuda`, `cuda:1`)")
    base_url: str | None = Field(
        None,
        description=(
            "a served model (embedder `openai` kind, reranker `http` backend, generator `openai` kind): the server's "
            "URL, e.g. http://127.0.0.1:8000/v1"
        ),
    )
    api_key_env: str | None = Field(None, description="name of the env var holding the key, never the key")
    timeout_s: float = Field(60.0, description="a served model: seconds per request")
    max_retries: int = Field(3, description="a served model: retries of a failed request")


class EmbedderConfig(ModelPlacement):
    """Dense encoder. `transformers` follows the Qwen3-Embedding recipe (last-token pooling,
    instruction on queries only, L2-normalised); `openai` calls a /v1/embeddings endpoint."""

    kind: Literal["transformers", "sentence_transformers", "openai"] = Field(
        description=(
            "`transformers` (Qwen3-Embedding recipe), `sentence_transformers`, or `openai` (a /v1/embeddings endpoint)"
        )
    )
    model: str = Field(description="local path or hub id (transformers/ST) or served model name (openai)")
    query_instruction: str | None = Field(
        "Given a web search query, retrieve relevant passages that answer the query",
        description=("instruction prefixed to queries only (Qwen3-Embedding); null: none"),
    )
    batch_size: int = Field(32, description="texts per encoder call")
    max_length: int = Field(512, description="longest input text, in tokens")


class IndexConfig(Strict):
    """Where the index lives and which parts it has."""

    dir: str = Field(description="the index folder (manifest.json, BM25 and FAISS files)")
    bm25: BM25Config | None = Field(
        BM25Config(), description=("the sparse index; null: none (bm25 and hybrid retrieval need it)")
    )
    dense: DenseIndexConfig | None = Field(None, description="the dense index; null: none (needs `embedder`)")
    rrf_k: int = Field(60, ge=0, description="reciprocal-rank fusion constant")


class RetrievalConfig(Strict):
    """Two-stage retrieval: top_n candidates from the index, reranked to top_k."""

    mode: Literal["bm25", "dense", "hybrid"] = Field(
        "bm25", description=("`bm25`, `dense` (needs index.dense and an embedder) or `hybrid` (both, reciprocal-rank fused)")
    )
    top_n: int = Field(20, ge=1, description="candidates from the index")
    top_k: int = Field(5, ge=1, description="passages given to the model")
    min_score: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=('reranker threshold: passages whose probability of "yes" is below it are dropped; null: none'),
    )


class RerankerConfig(ModelPlacement):
    """Cross-encoder reranking. `qwen3`: P(yes) at the last position, as Qwen3-Reranker."""

    kind: Literal["qwen3", "cross_encoder"] = Field(
        "qwen3",
        description=(
            "`qwen3`: P(yes) at the last position, as Qwen3-Reranker; `cross_encoder`: a sentence-transformers cross-encoder"
        ),
    )
    backend: Literal["transformers", "vllm", "http"] = Field(
        "transformers", description=("where it runs: in-process `transformers`, in-process `vllm`, or an `http` server")
    )
    model: str = Field(description="local path or hub id (served model name for http)")
    instruction: str = Field(
        "Given a web search query, retrieve relevant passages that answer the query",
        description=("the task instruction in the reranker's prompt"),
    )
    batch_size: int = Field(16, description="pairs per scoring call")
    max_length: int = Field(1024, description="tokens of the whole pair prompt")


class GeneratorConfig(ModelPlacement):
    """A chat LM. The adapter (LoRA) is chosen per request by name from `adapters`."""

    kind: Literal["transformers", "vllm", "ctranslate2", "openai"] = Field(
        description=(
            "`transformers` (in-process HF generate), `vllm` (in-process engine), `ctranslate2` (in-process C++ "
            "decoder on a converted copy, adapters merged) or `openai` (an OpenAI-compatible server)"
        )
    )
    model: str = Field(description="local path / hub id, or the served base-model name (openai)")
    adapters: dict[str, str] = Field({}, description="name -> adapter path (transformers/vllm) or served name")
    max_new_tokens: int = Field(64, description="tokens generated per answer (default for callers that set none)")
    temperature: float = Field(0.0, description="0 = greedy")
    max_model_len: int = Field(2048, description="tokens; prompts longer than this are truncated (see generate.py)")
    fp32_lm_head: bool = Field(
        True,
        description=(
            "transformers kind: with a half-precision `dtype`, compute the LM head in fp32 so token probabilities "
            "(verdict scores, the NLL gate) do not tie on bf16's 8-bit mantissa; the body keeps the fast "
            "half-precision matmuls. (vLLM computes logits in the model dtype.)"
        ),
    )
    batch_size: int = Field(
        16, description=("prompts per generate call (vllm: max_num_seqs; openai: requests in flight per server)")
    )
    max_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description=(
            "transformers kind: also cap each batch's padded size, (longest prompt + new tokens) x rows, in tokens. "
            "The KV cache grows with it (Qwen3-4B: ~144 KiB per token in bf16), so 64 rows of 4k-token prompts need "
            "~37 GiB of cache alone; null = `batch_size` rows whatever their length."
        ),
    )
    attn_impl: Literal["eager", "sdpa"] | None = Field(
        None,
        description=(
            "transformers kind: the attention kernel (transformers' `attn_implementation`); null = its default "
            "(SDPA). `eager` is the plain matmul-softmax-matmul, faster than SDPA's CPU kernel on short rows."
        ),
    )
    prefix_cache: bool = Field(
        False,
        description=(
            "transformers kind: prefill each batch's common leading tokens (system prompt, sources header) once, as "
            "one row, and share their keys/values with every row. Same tokens as without it up to half-precision "
            "rounding."
        ),
    )
    prompt_lookup: int | None = Field(
        default=None,
        ge=1,
        description=(
            "transformers kind, greedy only: a request decoded alone (a batch of one row: one client of `serve`) drafts "
            "up to this many tokens by matching its last tokens against its own prompt (transformers' prompt-lookup "
            "decoding) and the model verifies them in one forward pass. The model still chooses every token, so the "
            "text is the same; a step that verifies k drafted tokens reads the weights once instead of k times (a "
            "decode step is bound by the weight read). Pays where replies copy the prompt (sources, the forced "
            "memory). null = off."
        ),
    )
    engine_dir: str = Field(
        "checkpoints/engines",
        description=(
            "ctranslate2 kind: where the converted copies live, one folder per base + adapter + dtype, named by the "
            "sha256 of their weights (a retrained adapter is converted again, never read from a stale copy)"
        ),
    )
    max_lora_rank: int = Field(64, description="vllm kind: largest LoRA rank the engine accepts (vLLM max_lora_rank)")
    chat_template_kwargs: dict[str, bool] = Field(
        {"enable_thinking": False}, description=("passed to the tokenizer's chat template (Qwen3: enable_thinking false)")
    )
    extra_base_urls: list[str] = Field(
        [],
        description=(
            "openai kind: more servers holding the same base model and adapters (vLLM replicas); requests go "
            "round-robin over `base_url` and these, `batch_size` in flight per server, and a request whose server "
            "fails after its retries is tried once on the next server."
        ),
    )
    timeout_s: float = Field(120.0, description="openai kind: seconds per request (a whole answer)")
    gpu_memory_utilization: float = Field(
        0.85, description=("vllm kind: share of GPU memory the engine may take (vLLM gpu_memory_utilization)")
    )
    extra_engine_args: dict[str, str | int | float | bool] = Field({}, description="vllm kind: passed to LLM()")

    @model_validator(mode="after")
    def _check(self) -> GeneratorConfig:
        if self.extra_base_urls and (self.kind != "openai" or not self.base_url):
            raise ValueError("extra_base_urls are for the openai kind, beside its base_url")
        if self.max_batch_tokens is not None and self.kind != "transformers":
            raise ValueError(
                f"max_batch_tokens is for the transformers kind, not {self.kind} "
                "(vLLM: extra_engine_args max_num_batched_tokens)"
            )
        if self.prefix_cache and self.kind != "transformers":
            raise ValueError(
                f"prefix_cache is for the transformers kind, not {self.kind} (vLLM: extra_engine_args enable_prefix_caching)"
            )
        if self.prompt_lookup is not None and (self.kind != "transformers" or self.temperature > 0):
            raise ValueError("prompt_lookup is for the transformers kind with greedy decoding (temperature 0)")
        if self.attn_impl is not None and self.kind != "transformers":
            raise ValueError(f"attn_impl is for the transformers kind, not {self.kind} (vLLM picks its own kernels)")
        return self


class PromptConfig(Strict):
    """Grounded-prompt wording; `auto` picks zh/fr/en from the question's script."""

    language: Literal["auto", "zh", "en", "fr"] = Field(
        "auto", description=("wording of the grounded prompt: `zh`, `en`, `fr`, or `auto` (from the question's script)")
    )
    system: dict[str, str] = Field({}, description="per-language override of the system prompt")
    max_context_chars: int | None = Field(None, description="extra cap on the sources block, in characters; null: none")


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
    def _check(self) -> RAGConfig:
        if (self.index.dense is not None or self.retrieval.mode != "bm25") and self.embedder is None:
            raise ValueError("dense or hybrid retrieval needs an `embedder`")
        if self.retrieval.mode in ("dense", "hybrid") and self.index.dense is None:
            raise ValueError(f"retrieval.mode={self.retrieval.mode} needs `index.dense`")
        if self.retrieval.mode in ("bm25", "hybrid") and self.index.bm25 is None:
            raise ValueError(f"retrieval.mode={self.retrieval.mode} needs `index.bm25`")
        return self
