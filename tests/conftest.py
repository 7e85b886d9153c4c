"""Shared test set-up: tiny models are faster on one thread (no thread-pool overhead per small kernel)."""

import torch

torch.set_num_threads(1)
