"""Memory extractors: an offline heuristic and an LLM extractor (:mod:`tulip_memory.chat`)."""

from tulip_memory.chat import Usage
from tulip_memory.extract.heuristic import heuristic_extract
from tulip_memory.extract.llm import (
    ExtractionError,
    ExtractionResult,
    LLMExtractor,
    LLMExtractorConfig,
)
from tulip_memory.extract.parse import DroppedItem

__all__ = [
    "DroppedItem",
    "ExtractionError",
    "ExtractionResult",
    "LLMExtractor",
    "LLMExtractorConfig",
    "Usage",
    "heuristic_extract",
]
