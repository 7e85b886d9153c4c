"""What one request may ask for, and the server's other settings (plain dataclasses: `--help` needs no FastAPI)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Limits:
    """Bounds on one request (each is a `serve` option; README "Serve" lists the defaults). Together with
    --max-batch they bound the memory a batch can take: max_batch x (max_prompt_tokens + max_tokens) tokens of KV."""
    max_body_bytes: int = 1 << 20        # 1 MiB of JSON, else 413
    max_prompt_tokens: int = 4096        # else 400; also capped by the model's context
    max_tokens: int = 2048               # per choice, else 400
    max_n: int = 8                       # sequences per request (n x prompts for /v1/completions), else 400
    max_classify_inputs: int = 256       # texts per /v1/classify request, else 400


@dataclass
class ImageLimits:
    """Bounds on the images of one chat request to a vision-language model (each a `serve` option; serve/media.py)."""
    max_images: int = 8
    max_image_bytes: int = 8 << 20           # decoded bytes of one image
    max_image_pixels: int = 16_000_000       # width x height, read from the image's header
    # Folders (resolved, absolute) whose image files a request may name by path (--allow-local-images DIR ...); empty:
    # data URLs only. Never a URL.
    local_image_dirs: tuple = ()

    @property
    def allow_local_images(self) -> bool:
        return bool(self.local_image_dirs)


@dataclass
class ServeSettings:
    api_key: Optional[str] = None
    cors_origins: list = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    retry_after_s: int = 1
    # a control-token string in a chat message or classify input is encoded as text (data/control_text.py); False:
    # as the control token, as training encoded its data
    strict_special_tokens: bool = True
    images: ImageLimits = field(default_factory=ImageLimits)
