"""Stability defaults of the ROCm profile (seed 000): applied only to keys the user did not set, each recorded
with its reason.
"""

from __future__ import annotations

# ROCm profile (seed 000): Qwen-class LoRA on ROCm oscillates or diverges early with the CUDA defaults; a
# lower learning rate, a longer warm-up and tighter clipping made it converge like on A100/H800.
ROCM_STABILITY_DEFAULTS = {
    "learning_rate": (5e-5, "ROCm profile (seed 000): lower learning rate; large steps amplify rocBLAS/MIOpen "
                            "mixed-precision accumulation noise"),
    "warmup_ratio": (0.1, "ROCm profile (seed 000): warm-up 0.1 instead of 0.03 smooths early updates"),
    "max_grad_norm": (0.5, "ROCm profile (seed 000): tighter gradient clipping keeps single bad batches from "
                           "wrecking the weights"),
}


def apply_hardware_profile(cfg, backend: str) -> dict:
    """Fill stability defaults for the backend into keys the user did not set; each is recorded with its
    reason via cfg.decide. Returns {key: value} of what was applied."""
    if backend != "rocm":
        return {}
    applied = {}
    for key, (value, reason) in ROCM_STABILITY_DEFAULTS.items():
        if key in cfg.user_keys or (key == "warmup_ratio" and "warmup_steps" in cfg.user_keys):
            continue
        setattr(cfg.train, key, value)
        cfg.decide(key, value, reason)
        applied[key] = value
    return applied
