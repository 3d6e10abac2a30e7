"""BuildConfig, QuantConfig and QuantAlgo as the LLM API names them (the stand-in's subset)."""

from dataclasses import dataclass
from enum import Enum


class QuantAlgo(Enum):
    FP8 = "FP8"
    W8A16 = "W8A16"
    W4A16_AWQ = "W4A16_AWQ"
    NVFP4 = "NVFP4"


@dataclass
class BuildConfig:
    max_batch_size: int = 2048
    max_seq_len: int | None = None
    max_num_tokens: int = 8192


@dataclass
class QuantConfig:
    quant_algo: QuantAlgo | None = None
