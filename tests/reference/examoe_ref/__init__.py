"""ExaMoE PyTorch reference: an independent implementation of the model of
docs/architecture.md ("The model"), used to check the C++ code. See ../README.md."""

from .config import Config, param_shapes, is_moe_layer, expert_capacity  # noqa: F401
from .model import forward, random_weights, route  # noqa: F401
