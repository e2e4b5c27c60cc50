"""A local Hugging Face–compatible hub for tests, the benchmark and the demo."""

from .content import BytesContent, ConcatContent, PatternContent, make_model, safetensors_content
from .server import Fault, HubFile, RequestRecord, TestHub

__all__ = [
    "BytesContent", "ConcatContent", "Fault", "HubFile", "PatternContent", "RequestRecord",
    "TestHub", "make_model", "safetensors_content",
]
