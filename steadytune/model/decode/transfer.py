"""Small host lists to the device without waiting for it.

A copy from ordinary (pageable) host memory to a GPU returns only once the copy is done, i.e. after every kernel
queued before it: one such copy in a decode step makes the host wait for the whole step. A copy from pinned memory
is queued like a kernel and the host moves on (PyTorch's pinned-memory cache keeps the source alive until the copy
ran).
"""

from __future__ import annotations

import torch


def to_device(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    tensor = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
