"""Memory extractors: an offline heuristic and an LLM extractor through litellm."""

from tulip_memory.extract.heuristic import heuristic_extract
from tulip_memory.extract.llm import (
    ExtractionError,
    ExtractionResult,
    LLMExtractor,
    LLMExtractorConfig,
    Usage,
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
