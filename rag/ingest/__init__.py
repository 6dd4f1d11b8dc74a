"""Ingest and chunking: the corpus folders -> parsed Documents -> Chunks with stable ids.

- `walk.py`: which files a corpus is (the walk under `corpus.paths`, before anything is opened);
- `parse.py`: each file (text, Markdown, HTML, PDF, DOCX) -> a Document, every bad file reported;
- `chunk.py`: Documents -> Chunks (paragraph or heading chunkers, size and overlap in characters).
"""

from lorarag.rag.ingest.chunk import Chunker, make_chunker
from lorarag.rag.ingest.parse import IngestError, IngestReport, ingest, read_file
from lorarag.rag.ingest.walk import walk_corpus

__all__ = ["Chunker", "IngestError", "IngestReport", "ingest", "make_chunker", "read_file", "walk_corpus"]
