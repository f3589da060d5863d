"""cs336_basics: the reference Transformer LM."""

from .data import get_batch
from .model import (
    Embedding,
    Linear,
    MultiHeadSelfAttention,
    RMSNorm,
    RotaryPositionalEmbedding,
    SwiGLU,
    TransformerBlock,
    TransformerLM,
    causal_attention,
    scaled_dot_product_attention,
    set_attention,
    silu,
    softmax,
)
from .nn_utils import clip_gradient, cross_entropy
from .optimizer import AdamW, cosine_lr
from .serialization import load_checkpoint, save_checkpoint

__all__ = [
    "AdamW",
    "Embedding",
    "Linear",
    "MultiHeadSelfAttention",
    "RMSNorm",
    "RotaryPositionalEmbedding",
    "SwiGLU",
    "TransformerBlock",
    "TransformerLM",
    "causal_attention",
    "clip_gradient",
    "cosine_lr",
    "cross_entropy",
    "get_batch",
    "load_checkpoint",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "set_attention",
    "silu",
    "softmax",
]
