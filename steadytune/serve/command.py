"""`steadytune serve`: the subcommand (arguments and run); the package docstring says what the parts do."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

from steadytune.errors import UserError
from steadytune.hardware.error_catalogue import explain_failure as explain_failure   # cli: the likely-cause line
from steadytune.serve.limits import ImageLimits, Limits, ServeSettings

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000


def add_arguments(parser) -> None:

    limits = Limits()
    parser.add_argument("source", metavar="CONFIG|RUN_DIR",
                        help="the run's YAML (its adapter_name_or_path or output_dir is served; a config with nothing "
                             "trained serves the base model), or a run folder written by `steadytune train`")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, as for train")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: this "
                        "machine only; another address exposes the server, so set an API key)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                        help="serve another LoRA adapter of the same base model under NAME (a run folder, or an "
                             "adapter folder that uses SOURCE's template); repeat for more")
    parser.add_argument("--served-model-name", default=None, metavar="NAME",
                        help="the name clients send as `model` for SOURCE (default: the run folder's name)")
    parser.add_argument("--api-key", default=os.environ.get("API_KEY"), metavar="KEY",
                        help="require `Authorization: Bearer KEY` on /v1 routes and /metrics (default: the API_KEY "
                             "environment variable, which, unlike this option, other users cannot see in `ps`)")
    parser.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                        help="allow browser pages from ORIGIN (e.g. http://localhost:3000) to call the API; repeat "
                             "for more (default: CORS off)")
    parser.add_argument("--max-batch", type=int, default=32,
                        help="most sequences decoded together in one forward pass (default 32; 1 = one at a time)")
    parser.add_argument("--max-queue", type=int, default=128,
                        help="most sequences waiting for the batch; beyond it requests get 503 with Retry-After "
                             "(default 128)")
    parser.add_argument("--max-body-bytes", type=int, default=limits.max_body_bytes,
                        help=f"largest request body, else 413 (default {limits.max_body_bytes})")
    parser.add_argument("--max-prompt-tokens", type=int, default=limits.max_prompt_tokens,
                        help=f"longest prompt in tokens, else 400 (default {limits.max_prompt_tokens}, and never "
                             "more than the model's context)")
    parser.add_argument("--max-tokens", type=int, default=limits.max_tokens,
                        help=f"largest max_tokens a request may ask for, else 400 (default {limits.max_tokens}; a "
                             "request without max_tokens gets the run's max_new_tokens)")
    parser.add_argument("--max-n", type=int, default=limits.max_n,
                        help=f"most sequences one request may ask for (n, times the prompts of /v1/completions), "
                             f"else 400 (default {limits.max_n})")
    parser.add_argument("--max-classify-inputs", type=int, default=limits.max_classify_inputs,
                        help=f"most texts per /v1/classify request, else 400 (default {limits.max_classify_inputs})")
    parser.add_argument("--strict-special-tokens", action=argparse.BooleanOptionalAction, default=True,
                        help="encode a special-token string (<|im_end|>, <start_of_turn>, ...) inside a chat message "
                             "or a classify input as the text it is, so only the chat template writes control tokens "
                             "(default on; --no-strict-special-tokens encodes it as the control token, as training "
                             "does with its data; /v1/completions prompts are raw either way)")
    images = ImageLimits()
    group = parser.add_argument_group("images (a vision-language model's chat requests: OpenAI image_url parts as data "
                                      "URLs; nothing is ever fetched from the network)")
    group.add_argument("--allow-local-images", nargs="+", action="extend", default=[], metavar="DIR",
                       help="also take an image_url that is a file path on this server (file:///... or /...), of an "
                            "image inside one of these folders (after links are resolved; give it after CONFIG|RUN_DIR, "
                            "or as --allow-local-images=DIR); refused on a non-loopback --host without an API key. "
                            "Off: data URLs only")
    group.add_argument("--max-images", type=int, default=images.max_images,
                       help=f"most images in one request, else 400 (default {images.max_images})")
    group.add_argument("--max-image-bytes", type=int, default=images.max_image_bytes,
                       help=f"largest image (its decoded bytes), else 400 (default {images.max_image_bytes}; a data "
                            "URL also counts against --max-body-bytes, which must be raised for large images)")
    group.add_argument("--max-image-pixels", type=int, default=images.max_image_pixels,
                       help=f"largest image as width x height, read from its header before decoding, else 400 "
                            f"(default {images.max_image_pixels})")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                        help="server log level (default info)")


def settings_from_args(args):

    for option in ("max_batch", "max_queue", "max_body_bytes", "max_prompt_tokens", "max_tokens", "max_n",
                   "max_classify_inputs", "max_images", "max_image_bytes", "max_image_pixels"):
        if getattr(args, option) < 1:
            raise UserError(f"--{option.replace('_', '-')} must be at least 1 (got {getattr(args, option)})")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be 1-65535 (got {args.port})")
    limits = Limits(max_body_bytes=args.max_body_bytes, max_prompt_tokens=args.max_prompt_tokens,
                    max_tokens=args.max_tokens, max_n=args.max_n, max_classify_inputs=args.max_classify_inputs)
    images = ImageLimits(max_images=args.max_images, max_image_bytes=args.max_image_bytes,
                         max_image_pixels=args.max_image_pixels,
                         local_image_dirs=local_image_dirs(args.allow_local_images, args.host, args.api_key))
    return ServeSettings(api_key=args.api_key or None, cors_origins=list(args.cors_origin), limits=limits,
                         strict_special_tokens=args.strict_special_tokens, images=images)


def local_image_dirs(given: list[str], host: str, api_key: str | None) -> tuple[str, ...]:
    """--allow-local-images' folders, resolved (each must be a folder). The studio's rule for a server reachable from
    other machines holds here too: without an API key anyone who reaches the port could read images on this one."""
    if not given:
        return ()
    if not _is_loopback(host) and not api_key:
        raise UserError(f"--allow-local-images with --host {host}: any machine that reaches this port could read the "
                        "images in those folders; set an API key (API_KEY=$(openssl rand -hex 16) in the "
                        "environment, or --api-key KEY), or listen on 127.0.0.1")
    folders = []
    for folder in given:
        path = os.path.realpath(os.path.expanduser(folder))
        if not os.path.isdir(path):
            raise UserError(f"--allow-local-images {folder}: not a folder (give the folders whose images requests "
                            "may name by path)")
        folders.append(path)
    return tuple(dict.fromkeys(folders))


def build_engine(loaded, max_batch: int, max_queue: int):
    """The engine for what `loading.load_served` returned: vLLM's, or the transformers batcher."""
    if loaded.backend == "vllm":
        # lazy: serve.vllm_engine loads torch; `--help` answers without loading it
        from steadytune.serve.vllm_engine import VllmEngine
        return VllmEngine(loaded, max_batch, max_queue)
    # lazy: serve.engine loads torch; `--help` answers without loading it
    from steadytune.serve.engine import BatchingEngine
    return BatchingEngine(loaded.model, loaded.tokenizer, max_batch=max_batch, max_queue=max_queue)


def run(args) -> int:
    settings = settings_from_args(args)
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise UserError(f"serve needs FastAPI and uvicorn ({e.name} is missing): pip install 'steadytune[serve]'") from None
    from steadytune.serve.app import build_app  # lazy: serve.app loads torch; `--help` answers without loading it

    # lazy: serve.loading loads torch; `--help` answers without loading it
    from steadytune.serve.loading import load_served

    loaded = load_served(args.source, args.adapter, args.overrides, args.served_model_name)
    print(loaded.description)
    engine = build_engine(loaded, args.max_batch, args.max_queue)
    app = build_app(engine, loaded, settings)
    if not _is_loopback(args.host) and not settings.api_key:
        print(f"warning: listening on {args.host} without an API key: anyone who reaches this port can use the "
              "model; set API_KEY", file=sys.stderr)
    if settings.images.local_image_dirs:
        print(f"requests may name image files in {', '.join(settings.images.local_image_dirs)}", flush=True)
    print(f"serving {', '.join(loaded.served)} on http://{args.host}:{args.port}/v1 "
          f"(max batch {args.max_batch}, queue {args.max_queue}{', API key required' if settings.api_key else ''})",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
