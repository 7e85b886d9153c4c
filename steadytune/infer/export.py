"""`steadytune export CONFIG|RUN_DIR|ARCHIVE [key=value ...]`: take a run to the places models run.

- a merged Hugging Face folder (`export_dir`): the adapter folded into its base, sharded safetensors
  (`export_size` GB), the tokenizer with the run's chat template, generation_config.json with its stop tokens,
  the dtype of `infer_dtype` (LLaMA-Factory's merge_lora YAMLs run as they are);
- a GGUF file next to it (`export_format: gguf` or `--gguf f16|bf16|q8_0`), written in-process and loaded back to
  check it (`gguf_file.verify_gguf`);
- the adapter archive (`--archive`): one .tar.gz with a SHA-256 manifest that `chat`, `predict`, `eval` and
  `train` (adapter_name_or_path) take as they take the folder.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import yaml

from steadytune.errors import UserError, size_text
from steadytune.hardware.backend import detect, device_for
from steadytune.hardware.error_catalogue import explain_failure as explain_failure   # cli: the likely-cause line
from steadytune.hardware.policy import choose_precision
from steadytune.infer.card import BASE_RECORD, describe_base, model_card, write_base_record
from steadytune.infer.generate import (
    chat_template_of,
    conversation_ids,
    conversation_prompt,
    run_template,
    stop_token_ids,
)
from steadytune.infer.gguf_file import GGUF_TYPES, check_gguf, verify_gguf, write_gguf
from steadytune.infer.gptq_export import calibration_samples, check_gptq_request, quantize_folder, read_texts
from steadytune.infer.gptq_export import describe as describe_gptq
from steadytune.infer.loading import BASE, load_run, open_run
from steadytune.infer.merge import (
    check_export_dir,
    choose_export_dtype,
    copy_run_records,
    export_stop_ids,
    merge_adapter,
    save_merged,
    save_processor_files,
    saved_dtype,
    template_eos,
)
from steadytune.model.archive import archive_members, archives_cache, is_archive, refuse_links_out, write_archive
from steadytune.model.load import _hub_reachable, load_image_processor, resolve_model_path
from steadytune.training.run_folder import record_outputs, refuse_if_in_use

EXPORT_KEYS = "export_dir, export_size, export_device, export_legacy_format, export_hub_model_id, export_format, " \
              "export_gguf_type, infer_dtype, export_quantization_bit, export_quantization_dataset"


def add_arguments(parser) -> None:

    parser.add_argument("source", help="the run: its config YAML (or a LLaMA-Factory merge_lora YAML), its output "
                                       "folder, or an adapter archive (.tar.gz)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help=f"config overrides; export keys: {EXPORT_KEYS}")
    parser.add_argument("--export-dir", metavar="DIR", help="where the merged model is written (export_dir)")
    parser.add_argument("--gguf", choices=GGUF_TYPES, metavar="TYPE",
                        help=f"also write a GGUF file for llama.cpp/Ollama: {', '.join(GGUF_TYPES)} "
                             "(export_format: gguf, export_gguf_type)")
    parser.add_argument("--archive", nargs="?", const="", metavar="PATH",
                        help="write the adapter archive (.tar.gz with a SHA-256 manifest); default path: "
                             "the run folder's name + .tar.gz next to it")
    parser.add_argument("--dtype", choices=("auto", "float16", "bfloat16", "float32"),
                        help="dtype of the merged weights (infer_dtype; auto: the base model's own, as LLaMA-Factory)")
    parser.add_argument("--shard-size", type=float, metavar="GB", help="largest safetensors shard in GB (export_size)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip loading the GGUF back to compare its logits with the merged model")
    parser.add_argument("--force", action="store_true",
                        help="replace exported files in a non-empty export_dir, or an existing archive")


def run(args) -> int:

    run_ = open_run(args.source, args.overrides)
    settings = run_.cfg.infer
    if args.export_dir:
        settings.export_dir = args.export_dir
    if args.gguf:
        settings.export_format, settings.export_gguf_type = "gguf", args.gguf
    if args.dtype:
        settings.infer_dtype = args.dtype
    if args.shard_size is not None:
        if args.shard_size <= 0:
            raise UserError(f"--shard-size must be above 0 (got {args.shard_size})")
        settings.export_size = args.shard_size
    if settings.export_legacy_format:
        raise UserError("export_legacy_format: true asks for pickle .bin weights, which transformers 5 no longer writes "
                        "and which can run code when loaded; set it to false (safetensors)")
    if settings.export_hub_model_id:
        check_hub_upload(settings.export_hub_model_id)
    if settings.export_quantization_bit is not None:
        if not settings.export_dir:
            raise UserError("export_quantization_bit: set export_dir, the folder the quantised model is written to")
        if settings.export_format == "gguf":
            raise UserError("export_quantization_bit (GPTQ) and export_format: gguf: choose one (GGUF has its own "
                            "quantised types: export_gguf_type q8_0)")
        check_gptq_request(settings.export_quantization_bit, settings.export_quantization_dataset)
    if not settings.export_dir and args.archive is None:
        raise UserError("export_dir: not set; where should the merged model go? (export_dir=saves/merged, or "
                        "--archive for the adapter archive only)")
    if args.archive is not None:
        archive_run(run_, Path(args.archive) if args.archive else None, args.force)
    if settings.export_dir:
        export_merged(run_, Path(settings.export_dir), force=args.force, verify=not args.no_verify)
        if settings.export_hub_model_id:
            upload(settings.export_hub_model_id, Path(settings.export_dir))
    return 0


# ---------------------------------------------------------------------------------------------------------
# Archive
# ---------------------------------------------------------------------------------------------------------

def archive_run(run_, target: Path | None, force: bool) -> Path:

    if run_.kind == BASE:
        raise UserError(f"{run_.origin}: names no trained adapter or model to archive (set adapter_name_or_path or "
                        "output_dir, or pass the run folder)")
    folder = run_.folder
    if target is None:
        target = folder.parent / f"{folder.resolve().name}.tar.gz"
    if not is_archive(target):
        raise UserError(f"--archive {target}: the archive name must end in .tar.gz")
    # Before anything is written into the folder: a training still writing there owns it, and a link out of it would
    # leak its target, or be written through.
    refuse_if_in_use(folder, "steadytune export --archive")
    refuse_links_out(folder, [m.name for m in archive_members(folder)], written=("README.md", BASE_RECORD))
    if archives_cache().resolve() not in folder.resolve().parents:  # an unpacked archive is repacked as it is
        write_base_record(folder, run_.cfg.model.model_name_or_path)
        (folder / "README.md").write_text(model_card(folder, source=target.name), encoding="utf-8")
    started = time.perf_counter()
    write_archive(folder, target, overwrite=force)
    members = archive_members(folder)
    print(f"archive {target}: {len(members) + 1} files ({', '.join(m.name for m in members)}, MANIFEST.sha256), "
          f"{size_text(target.stat().st_size, decimal=True)}, {time.perf_counter() - started:.1f} s")
    print(f"  use it as the run folder: steadytune chat {target}  |  steadytune predict {target} --input FILE")
    return target


# ---------------------------------------------------------------------------------------------------------
# Merged model (+ GGUF)
# ---------------------------------------------------------------------------------------------------------

def export_merged(run_, out_dir: Path, force: bool = False, verify: bool = True) -> dict:

    cfg, settings = run_.cfg, run_.cfg.infer
    refuse_if_in_use(out_dir, "steadytune export")
    check_export_dir(out_dir, force)
    info = detect()
    device = torch.device("cpu") if settings.export_device == "cpu" else device_for(info)
    started = time.perf_counter()
    print(f"export: {run_.describe()} -> {out_dir}")
    # Merge in fp32: the adapter's small updates are not rounded away by the base's precision. A QLoRA run's base is
    # quantised as in training, then decoded to fp32 before the adapter goes on (peft would otherwise merge into the
    # 4-bit layers and quantise the sum again, losing the update).
    quantized = cfg.model.quantization_bit is not None
    model, tokenizer = load_run(run_, device=device, dtype=torch.float32, dequantize=quantized)
    if quantized:
        print(f"warning: {run_.describe()} was trained on a {cfg.model.quantization_bit}-bit base: the merge goes into "
              "that base decoded to full precision, so the exported weights carry its quantisation error (the model "
              "you trained and evaluated, not the original base plus the adapter); it is as large as the unquantised "
              "base, and quantising it again (GGUF q8_0/q4) rounds it a second time. To keep the original weights, "
              "use the adapter on the base instead (steadytune chat/serve RUN_DIR)", file=sys.stderr)
    template = run_template(cfg, tokenizer)
    merged = merge_adapter(model).eval()
    if settings.export_format == "gguf":
        check_gguf(merged)   # an architecture the GGUF writer refuses stops the export before anything is written
    base_folder = Path(resolve_model_path(cfg.model))
    precision, _ = choose_precision(info, cfg.train.bf16, cfg.train.fp16)
    dtype, why = choose_export_dtype(settings.infer_dtype, saved_dtype(base_folder), precision)
    merge_seconds = time.perf_counter() - started
    out_dir.mkdir(parents=True, exist_ok=True)

    report: dict = {"export_dir": str(out_dir), "dtype": str(dtype).replace("torch.", ""), "merge_seconds": merge_seconds}
    if settings.export_format == "gguf":
        report["gguf"] = export_gguf(merged, tokenizer, template, out_dir, settings.export_gguf_type, verify,
                                     name=out_dir.resolve().name)
    saving = time.perf_counter()
    save_merged(merged, tokenizer, template, out_dir, dtype, settings.export_size, user_generation(cfg))
    processor_files = save_processor_files(merged, str(base_folder), out_dir,
                                           None if base_folder.is_dir() else load_image_processor(cfg.model))
    if processor_files:
        report["processor_files"] = processor_files
    if settings.export_quantization_bit is not None:
        report["gptq"] = export_gptq(settings, tokenizer, merged, out_dir, device)
    copy_run_records(run_.folder, out_dir)
    if quantized:
        forget_quantization(out_dir / "run_config.yaml")
    if not (out_dir / BASE_RECORD).is_file():
        import json
        (out_dir / BASE_RECORD).write_text(json.dumps(describe_base(cfg.model.model_name_or_path, str(base_folder)),
                                                      indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "README.md").write_text(model_card(out_dir, merged=True, source=str(out_dir)), encoding="utf-8")
    # Listed as steadytune's own, so `eval` may write its results here and a later export --force may replace them.
    record_outputs(out_dir, [p.name for p in out_dir.iterdir() if p.is_file()])
    report["save_seconds"] = time.perf_counter() - saving
    weights = sorted(out_dir.glob("model*.safetensors"))
    report["weights_bytes"] = sum(f.stat().st_size for f in weights)
    report["shards"] = len(weights)
    if "gptq" in report:   # the linear layers are GPTQ's packed integers now; the rest keeps the dtype chosen
        why = f"GPTQ {report['gptq']['bits']}-bit linear layers, the rest {report['dtype']}"
    else:
        why = f"{report['dtype']}: {why}"
    print(f"merged model in {out_dir}: {len(weights)} safetensors shard(s), "
          f"{size_text(report['weights_bytes'], decimal=True)} ({why}); chat template, eos {template.eos_token} and stop tokens "
          f"{export_stop_ids(template, tokenizer, merged.generation_config.eos_token_id)} saved; "
          f"{time.perf_counter() - started:.1f} s")
    return report


def export_gptq(settings, tokenizer, merged, out_dir: Path, device: torch.device) -> dict:
    """The merged folder just written, quantised by GPTQ in place, loaded back and compared (infer/gptq_export.py)."""
    samples = calibration_samples(tokenizer, read_texts(settings.export_quantization_dataset),
                                  settings.export_quantization_nsamples, settings.export_quantization_maxlen)
    prompt = tokenizer(VERIFY_TEXTS[0], return_tensors="pt")["input_ids"]
    report = quantize_folder(out_dir, settings.export_quantization_bit, samples, device=str(device),
                             reference=merged.float(), prompt_ids=prompt)
    print(f"quantised: {describe_gptq(report)}", flush=True)
    return report


def forget_quantization(record: Path) -> None:
    """The merged folder's copy of run_config.yaml without quantization_bit: the merged weights are plain (dequantised)
    ones, and chat / eval of the export load them as they are, not quantised a second time."""
    if not record.is_file():
        return
    saved = yaml.safe_load(record.read_text(encoding="utf-8")) or {}
    saved["quantization_bit"] = None
    record.write_text(yaml.safe_dump(saved, sort_keys=False, allow_unicode=True), encoding="utf-8")


def user_generation(cfg) -> dict:
    """Generation settings for generation_config.json: sampling only when do_sample is set (the model's own
    defaults stay otherwise; transformers refuses a temperature without sampling)."""
    g = cfg.infer
    out: dict = {"max_new_tokens": cfg.train.max_new_tokens} if "max_new_tokens" in cfg.user_keys else {}
    if g.do_sample is not None:
        out["do_sample"] = g.do_sample
        if g.do_sample:
            out.update(temperature=g.temperature, top_p=g.top_p, top_k=g.top_k)
    if g.repetition_penalty != 1.0:
        out["repetition_penalty"] = g.repetition_penalty
    if g.num_beams > 1:
        out.update(num_beams=g.num_beams, length_penalty=g.length_penalty)
    return out


VERIFY_TEXTS = ("The quick brown fox jumps over the lazy dog.", "这个商品很好，质量不错，物流很快。",
                "What is the capital of France?", "包装破损，很失望。  Two  spaces\nand a new line.",
                "Give three tips for staying healthy.", "书的内容很精彩，值得一读。")


def export_gguf(merged, tokenizer, template, out_dir: Path, kind: str, verify: bool, name: str) -> dict:

    path = out_dir / f"{name}-{kind}.gguf"
    started = time.perf_counter()
    with template_eos(tokenizer, template):  # the GGUF's eos is the exported tokenizer's (llama.cpp's converter)
        write_gguf(merged, tokenizer, path, kind, chat_template_of(template), stop_token_ids(template, tokenizer), name)
    report = {"path": str(path), "bytes": path.stat().st_size, "seconds": time.perf_counter() - started}
    print(f"GGUF {kind}: {path} ({size_text(report['bytes'], decimal=True)}, {report['seconds']:.1f} s)")
    if verify:
        turns = [[{"role": "user", "content": t}] for t in VERIFY_TEXTS]
        texts = [conversation_prompt(template, turn) for turn in turns]
        prompts = [conversation_ids(template, tokenizer, turn) for turn in turns]
        check = verify_gguf(path, merged, tokenizer, prompts, list(VERIFY_TEXTS) + texts, kind)
        print(check.describe())
        report["check"] = check.__dict__
        if not check.ok:
            raise UserError(f"{path}: the GGUF does not reproduce the merged model ({check.describe()}); the file is "
                            "left for inspection, do not ship it")
        if check.top1_agreement < 0.9:
            # A faithful file of a lossy type: small fine-tuning deltas can round away (measured on the demo: q4_k_m
            # kept 0.595 of 0.840 accuracy). Say so before someone ships it.
            print(f"warning: {kind} changes the most likely next token at {1 - check.top1_agreement:.0%} of positions; "
                  "measure the task on it before shipping (q8_0 keeps far more of a fine-tune)", file=sys.stderr)
    return report


# ---------------------------------------------------------------------------------------------------------
# Hub
# ---------------------------------------------------------------------------------------------------------

def check_hub_upload(repo_id: str) -> None:
    """Fail before any work when an upload cannot happen: no token, or no route to the hub."""
    from huggingface_hub import constants, get_token


    if not get_token():
        raise UserError(f"export_hub_model_id: {repo_id}: no hub upload here: no Hugging Face token on this machine "
                        "(hf auth login); export without the key, then upload the folder with `hf upload "
                        f"{repo_id} EXPORT_DIR`")
    if constants.HF_HUB_OFFLINE or not _hub_reachable(constants.ENDPOINT):
        raise UserError(f"export_hub_model_id: {repo_id}: no hub upload here: {constants.ENDPOINT} is not reachable "
                        f"from this machine; export without the key and run `hf upload {repo_id} EXPORT_DIR` where it is")


def upload(repo_id: str, folder: Path) -> None:
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message="steadytune export")
    print(f"uploaded {folder} to https://huggingface.co/{repo_id}")
