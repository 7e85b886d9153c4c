"""`steadytune chat CONFIG|RUN_DIR|ARCHIVE [key=value ...]`: talk to a trained run in the terminal.

Answers stream as they are generated (transformers' TextIteratorStreamer), with the run's chat template, system
prompt, history and stop tokens. `/reset` forgets the history, `/exit` (or end of input) leaves. When stdin is not
a terminal it reads one prompt per line and prints one answer per line, so it scripts and tests. A classification
run answers each line with its label and the label's probability.

A vision-language model takes images: `/image PATH` attaches a local image (or a data URL) to the next message;
several may be attached. Images stay with their message in the history (and leave with it when the oldest exchanges
are dropped to fit the context).
"""

from __future__ import annotations

import sys
from typing import IO, Iterator

from steadytune.errors import UserError
from steadytune.infer.backends import HUGGINGFACE, check_backend

COMMANDS = {"/reset": "forget the conversation so far", "/exit": "leave (also /quit, or end of input)",
            "/help": "this list"}
IMAGE_COMMAND = "/image"
IMAGE_HELP = "/image PATH: attach an image (a local file or a data URL) to the next message"


def add_arguments(parser) -> None:
    parser.add_argument("source", help="the run: its config YAML (or a LLaMA-Factory inference YAML), its output "
                                       "folder, an exported merged folder, or an adapter archive (.tar.gz)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides; generation keys: temperature, top_p, top_k, max_new_tokens, "
                             "repetition_penalty, do_sample, num_beams, default_system, infer_backend, infer_dtype")
    parser.add_argument("--system", metavar="TEXT", help="system prompt (default_system)")
    parser.add_argument("--max-new-tokens", type=int, metavar="N", help="longest answer in tokens (max_new_tokens)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (temperature; default 0.95)")
    parser.add_argument("--top-p", type=float, help="nucleus sampling (top_p; default 0.7)")
    parser.add_argument("--repetition-penalty", type=float, help="above 1.0 discourages repeats (repetition_penalty)")
    parser.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling (do_sample: false)")
    parser.add_argument("--seed", type=int, help="seed for sampling (default: the run's seed)")


def run(args) -> int:
    # lazy: infer.loading loads torch; `--help` answers without loading it
    from steadytune.infer.loading import open_run

    run_ = open_run(args.source, args.overrides)
    cfg = run_.cfg
    _apply_flags(cfg, args)
    if check_backend(cfg.infer.infer_backend) != HUGGINGFACE:
        raise UserError(f"infer_backend: {cfg.infer.infer_backend}: chat streams with transformers only; use "
                        "infer_backend: huggingface here (predict runs on vllm)")
    interactive = sys.stdin.isatty()
    session = ChatSession.load(run_, quiet=not interactive)
    return session.loop(sys.stdin, sys.stdout, interactive)


def _apply_flags(cfg, args) -> None:
    g = cfg.infer
    for flag, key in (("temperature", "temperature"), ("top_p", "top_p"), ("repetition_penalty", "repetition_penalty")):
        value = getattr(args, flag)
        if value is not None:
            if value <= 0:
                raise UserError(f"--{flag.replace('_', '-')} must be above 0 (got {value})")
            setattr(g, key, value)
            cfg.user_keys.add(key)
    if args.system is not None:
        cfg.data.default_system = args.system  # the template's default system prompt, as in training
    if args.max_new_tokens is not None:
        if args.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
        cfg.train.max_new_tokens = args.max_new_tokens
    if args.greedy:
        g.do_sample = False
    if args.seed is not None:
        cfg.train.seed = args.seed


class ChatSession:
    """One conversation with a loaded run: history, template, sampling and stop tokens."""

    def __init__(self, run_, model, tokenizer):
        # lazy: infer.classify loads torch; `--help` answers without loading it
        from steadytune.infer.classify import LabelScorer

        # lazy: infer.generate loads torch; `--help` answers without loading it
        from steadytune.infer.generate import run_template, sampling_of, stop_token_ids

        # lazy: infer.media loads torch and the image readers; `--help` answers without them
        from steadytune.infer.media import VisionPrompts

        # lazy: model.anatomy loads torch; `--help` answers without loading it
        from steadytune.model.anatomy import text_config

        self.run, self.model, self.tokenizer = run_, model, tokenizer
        cfg = run_.cfg
        self.template = run_template(cfg, tokenizer)
        self.sampling = sampling_of(cfg, sample_by_default=True)
        self.stops = stop_token_ids(self.template, tokenizer)
        self.system = None  # the template's own default_system (config or --system) applies
        self.history: list[dict] = []
        self.scorer = None
        if run_.is_classification:
            self.scorer = LabelScorer(model, tokenizer, self.template, cfg.data.label_names,
                                      cfg.data.prompt_template, cfg.data.cutoff_len)
        limit = getattr(text_config(model), "max_position_embeddings", None)
        self.max_prompt_tokens = (limit - self.sampling.max_new_tokens) if limit else None
        # a vision-language model: prompts with images (infer/media.py); images wait for the next message
        self.vision = VisionPrompts.for_model(cfg, model, tokenizer, self.template,
                                              folder=run_.folder if run_.kind == "model" else None)
        self.pending_images: list = []
        self.history_images: list[list] = []   # the images of each message of the history

    @classmethod
    def load(cls, run_, quiet: bool = False) -> "ChatSession":
        import torch

        # lazy: infer.loading loads torch; `--help` answers without loading it
        from steadytune.infer.loading import load_run

        torch.manual_seed(run_.cfg.train.seed)  # sampling is repeatable for the same inputs and seed
        model, tokenizer = load_run(run_, quiet=quiet)
        return cls(run_, model, tokenizer)

    @property
    def scores_images(self) -> bool:
        """A classification run of a vision-language model trained on conversations: a message is scored with the
        images attached to it (a prompt_template run scores text only)."""
        return self.scorer is not None and self.vision is not None and self.scorer.prompt_template is None

    def banner(self) -> str:
        what = (f"classification: each line is a text, the answer its label ({' / '.join(self.scorer.label_names)}) "
                "and probability" if self.scorer else f"generation: {self.sampling.describe()}")
        return (f"chat with {self.run.describe()}\n  template {self.template.name}; {what}\n"
                f"  {', '.join(COMMANDS)}" + (f"\n  {IMAGE_HELP}" if self.vision is not None else ""))

    def reset(self) -> None:
        self.history.clear()
        self.history_images.clear()
        self.pending_images.clear()

    def attach_image(self, argument: str) -> str:
        """`/image PATH`: open the image now (a bad file is said at once, not after the question), keep it for the
        next message; -> what to print."""
        # lazy: the image readers load Pillow; a text chat never needs them
        from steadytune.data.multimodal.media import open_image, resolve_media

        if self.vision is None:
            return f"(this model takes no images: {IMAGE_COMMAND} needs a vision-language model)"
        if self.scorer is not None and not self.scores_images:
            return f"(this classification run scores text put into its prompt_template; {IMAGE_COMMAND} takes no images here)"
        if not argument:
            return f"(usage: {IMAGE_HELP})"
        try:
            ref = resolve_media(argument, ".", IMAGE_COMMAND)[0]
            open_image(ref, IMAGE_COMMAND)
        except UserError as e:
            return f"({e})"
        self.pending_images.append(ref)
        return f"(image {len(self.pending_images)} attached; it goes with your next message)"

    # --- one turn -----------------------------------------------------------------------------------------

    def classify(self, text: str) -> str:
        if self.scores_images:   # the message with the images attached to it, as its rows were encoded
            ids, pixels = self.prompt(text)
            self.pending_images.clear()
            label, probability, probabilities = self.scorer.answer_prompt(ids, pixels)
        else:
            label, probability, probabilities = self.scorer.answer(text)
        others = ", ".join(f"{name} {p:.3f}" for name, p in probabilities.items())
        return f"{label} (p={probability:.3f}; {others})"

    def prompt_ids(self, user_text: str) -> list[int]:
        """The prompt for the next answer; the oldest turns are dropped when the context would overflow."""
        # lazy: infer.generate loads torch; `--help` answers without loading it
        from steadytune.infer.generate import conversation_ids

        return self.prompt(user_text)[0]

    def prompt(self, user_text: str) -> tuple[list[int], dict]:
        """(prompt ids, pixel inputs) for the next answer; the oldest exchanges (with their images) are dropped when
        the context would overflow."""
        # lazy: infer.generate loads torch; `--help` answers without loading it
        from steadytune.infer.generate import conversation_ids

        messages = self.history + [{"role": "user", "content": self._with_placeholders(user_text)}]
        images = self.history_images + [list(self.pending_images)]
        while True:
            if self.vision is not None:
                encoded = self.vision.encode(messages, self.system, [i for per in images for i in per], "chat")
                ids, pixels = encoded.ids, encoded.pixels
            else:
                ids, pixels = conversation_ids(self.template, self.tokenizer, messages, self.system), {}
            if self.max_prompt_tokens is None or len(ids) <= self.max_prompt_tokens or len(messages) <= 1:
                return ids, pixels
            messages, images = messages[2:], images[2:]  # drop the oldest exchange
            self.history, self.history_images = messages[:-1], images[:-1]

    def _with_placeholders(self, user_text: str) -> str:
        """The message as the template sees it: one <image> placeholder per attached image, before the text."""
        # lazy: data.multimodal loads torch; `--help` answers without loading it
        from steadytune.data.multimodal.plugins import IMAGE_PLACEHOLDER

        return IMAGE_PLACEHOLDER * len(self.pending_images) + user_text

    def answer(self, user_text: str) -> Iterator[str]:
        """Stream the answer to `user_text` and add the exchange to the history."""
        # lazy: infer.generate loads torch; `--help` answers without loading it
        from steadytune.infer.generate import stream_answer

        ids, pixels = self.prompt(user_text)
        parts = []
        for chunk in stream_answer(self.model, self.tokenizer, ids, self.sampling, self.stops,
                                   self.run.cfg.infer.skip_special_tokens, seed=self.run.cfg.train.seed,
                                   pixels=pixels):
            parts.append(chunk)
            yield chunk
        self.history += [{"role": "user", "content": self._with_placeholders(user_text)},
                         {"role": "assistant", "content": "".join(parts).strip()}]
        self.history_images += [list(self.pending_images), []]
        self.pending_images.clear()

    # --- the loop -----------------------------------------------------------------------------------------

    def loop(self, stdin: IO[str], stdout: IO[str], interactive: bool) -> int:
        if interactive:
            print(self.banner(), file=stdout)
        while True:
            line = _read(stdin, stdout, interactive)
            if line is None:
                break
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                break
            if text == "/reset":
                self.reset()
                print("(history cleared)", file=stdout, flush=True)
                continue
            if text == "/help":
                print("\n".join(f"  {k:8} {v}" for k, v in COMMANDS.items()), file=stdout, flush=True)
                if self.vision is not None:
                    print(f"  {IMAGE_HELP}", file=stdout, flush=True)
                continue
            if text == IMAGE_COMMAND or text.startswith(IMAGE_COMMAND + " "):
                print(self.attach_image(text[len(IMAGE_COMMAND):].strip()), file=stdout, flush=True)
                continue
            if self.scorer is not None:
                try:
                    print(self.classify(text), file=stdout, flush=True)
                except UserError as e:   # its images or template refuse the message: say why, keep the session
                    self.pending_images.clear()
                    print(f"({e})", file=stdout, flush=True)
                continue
            if interactive:
                print("assistant> ", end="", file=stdout, flush=True)
            try:
                for chunk in self.answer(text):
                    # One line per answer when scripted: an answer's own line breaks are kept only in a terminal.
                    print(chunk if interactive else chunk.replace("\n", " "), end="", file=stdout, flush=True)
            except UserError as e:   # a message the template or its images refuse: say why, keep the session
                self.pending_images.clear()
                print(f"({e})", end="", file=stdout, flush=True)
            print(file=stdout, flush=True)
        return 0


def _read(stdin: IO[str], stdout: IO[str], interactive: bool) -> str | None:
    if interactive:
        try:
            return input("user> ")
        except EOFError:
            print(file=stdout)
            return None
    line = stdin.readline()
    return line if line else None
