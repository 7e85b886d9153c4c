"""Run every LLaMA-Factory example config with steadytune, changing only the model (a tiny one) and dataset_dir,
and write the table docs/lf_examples.md: example -> runs / not supported (why). Not run in CI (minutes on a CPU).

    python tools/run_lf_examples.py [--examples ../shared/fixtures/llamafactory/examples] [--only train_lora]

The examples are run in the order of LLaMA-Factory's README (training before inference and merging, so the
adapters those read exist), each as its LLaMA-Factory command would run it: `llamafactory-cli train` ->
`steadytune train`, `chat` (inference/) -> `steadytune chat`, `export` (merge_lora/) -> `steadytune export`.
Files that are not run configs (accelerate/FSDP configs, extras/multi_tokens) are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXAMPLES = ROOT.parent / "shared" / "fixtures" / "llamafactory" / "examples"
NOT_RUN_CONFIGS = ("accelerate/", "ktransformers/accelerate/", "extras/multi_tokens/")
# What a run with the tiny stand-in cannot show.
NOTES = {f"train_qlora/llama3_lora_sft_{q}.yaml": f"with the unquantised tiny model; the real {q.upper()} checkpoint "
         f"it names is refused at start (pre-quantised checkpoint, quant_method {q})" for q in ("awq", "gptq", "aqlm")}
# Stand-ins of another shape. LLaMA Pro trains the blocks a block expansion inserted: its file names an expanded model
# with 8 such blocks (freeze_trainable_layers: 8), so its stand-in has 8 layers (the 2-layer one is refused, as
# LLaMA-Factory refuses it).
STAND_IN_SHAPES = {"extras/llama_pro/llama3_freeze_sft.yaml": {"num_hidden_layers": 8},
                   # GPTQ quantises groups of 128 input features (its CPU kernel needs whole groups)
                   "merge_lora/qwen3_gptq.yaml": {"hidden_size": 128, "intermediate_size": 256,
                                                  "num_attention_heads": 2, "num_key_value_heads": 2}}
NOTES["extras/llama_pro/llama3_freeze_sft.yaml"] = "on an 8-layer tiny stand-in (the expanded blocks: every layer)"
NOTES["merge_lora/qwen3_gptq.yaml"] = ("on a tiny stand-in 128 features wide (GPTQ's groups), with GPTQModel 5.8.0 "
                                       "installed (not a steadytune dependency: pip install 'steadytune[gptq]')")
# Datasets an example names that no folder here holds, stood in by LLaMA-Factory's demo rows (said in the table):
# the ASFT files name their authors' own datasets ('med', 'math': in no dataset_info.json of LLaMA-Factory's, so
# LLaMA-Factory stops there too), and v1's dpo data file names the hub's HuggingFaceH4/orca_dpo_pairs.
STAND_IN_DATASETS = {"med": "alpaca_en_demo.json", "math": "alpaca_en_demo.json"}
for _example, _name in (("extras/asft/llama2_full_asft.yaml", "med"), ("extras/asft/qwen2_full_asft.yaml", "math")):
    NOTES[_example] = (f"dataset '{_name}' is the ASFT authors' own (in no LLaMA-Factory dataset_info.json): "
                       f"LLaMA-Factory's {STAND_IN_DATASETS[_name]} stands in")
NOTES["v1/train_lora/train_lora_dpo.yaml"] = ("its data file names the hub's HuggingFaceH4/orca_dpo_pairs (no hub "
                                              "here): LLaMA-Factory's dpo_en_demo rows, written in that dataset's "
                                              "chosen/rejected-messages layout (v1's `pair`), stand in")
# LLaMA-Factory runs its Ray file with USE_RAY=1; its 4 workers get a local Ray told of 4 CPUs (2 cores here).
RAY_EXAMPLES = {"train_lora/qwen3_lora_sft_ray.yaml": 'ray_init_kwargs={"num_cpus": 4, "include_dashboard": false}'}
NOTES["train_lora/qwen3_lora_sft_ray.yaml"] = ("with USE_RAY=1 on a local Ray (ray_init_kwargs num_cpus: 4 added: "
                                               "this machine has 2 cores): 4 training processes")
ORDER = ("train_lora/", "train_qlora/", "train_full/", "extras/", "inference/", "merge_lora/", "ascend/",
         "ktransformers/", "megatron", "v1/")


V1_DATA = ROOT / "tests" / "golden" / "lf_v1_data"   # LLaMA-Factory's data/v1_*.yaml, which its v1 examples name
# LLaMA-Factory v1 picks the stage by command (`llamafactory-cli sft | dpo | rm | merge`), not by a key.
V1_STAGE = {"v1/train_lora/train_lora_dpo.yaml": "dpo"}


def command_for(relative: str) -> str:
    if relative.startswith("inference/"):
        return "chat"
    if relative.startswith("merge_lora/") or relative == "v1/train_lora/export_lora.yaml":
        return "export"
    return "train"


def sort_key(examples: Path, path: Path) -> tuple:
    relative = str(path.relative_to(examples))
    group = next((i for i, o in enumerate(ORDER) if relative.startswith(o)), len(ORDER))
    return group, command_for(relative) == "export", relative   # a merge after the training that writes its adapter


def tiny_model(folder: Path, **overrides) -> Path:
    """A tiny random Qwen2 with a tokenizer that knows every template's special tokens."""
    sys.path.insert(0, str(ROOT))
    from steadytune.model.tiny import build_chat_tokenizer, build_model

    tokenizer = build_chat_tokenizer("bytelevel")
    model = build_model("qwen2", tokenizer, **overrides)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def add_stand_in_datasets(data: Path) -> None:
    """STAND_IN_DATASETS added to the run's dataset_info.json (write_hub_stand_ins made it a copy of LF's)."""
    info_file = data / "dataset_info.json"
    info = json.loads(info_file.read_text(encoding="utf-8"))
    info.update({name: {"file_name": file} for name, file in STAND_IN_DATASETS.items()})
    info_file.write_text(json.dumps(info, indent=1, ensure_ascii=False), encoding="utf-8")


def stand_in_pair_data(folder: Path, data_dir: Path) -> None:
    """data/v1_dpo_demo.yaml reads a local file of `pair` rows made from dpo_en_demo.json instead of the hub."""
    rows = []
    for row in json.loads((data_dir / "dpo_en_demo.json").read_text(encoding="utf-8")):
        roles = {"human": "user", "gpt": "assistant", "system": "system"}
        prompt = [{"role": roles[m["from"]], "content": m["value"]} for m in row["conversations"]]
        rows.append({"chosen": prompt + [{"role": "assistant", "content": row["chosen"]["value"]}],
                     "rejected": prompt + [{"role": "assistant", "content": row["rejected"]["value"]}]})
    (folder / "orca_dpo_pairs_stand_in.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    spec = yaml.safe_load((folder / "v1_dpo_demo.yaml").read_text(encoding="utf-8"))
    for entry in spec.values():
        entry.update(path="data/orca_dpo_pairs_stand_in.jsonl", source="local")
        entry.pop("split", None)
    (folder / "v1_dpo_demo.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")


# Stops that are this CPU machine's, not steadytune's: the message says the file needs a GPU (flash-attn, liger's
# Triton kernels and fp8 matmuls exist only there). The table says "needs a GPU" for them, not "not supported".
GPU_REQUIREMENTS = ("flash-attn does not import", "Triton kernels need a GPU", "fp8 training needs a GPU")


def verdict(result: dict) -> str:
    if result["runs"]:
        return "runs"
    return "needs a GPU" if any(p in result["why"] for p in GPU_REQUIREMENTS) else "not supported"


# Vision-language models an example names -> the tiny stand-in of its family (steadytune/model/tiny_vlm.py).
VLM_FAMILIES = ((re.compile(r"Qwen3-VL-\d+B-A\d+B", re.I), "qwen3_vl_moe"), (re.compile(r"Qwen3-VL", re.I), "qwen3_vl"),
                (re.compile(r"Qwen3\.5-\d", re.I), "qwen3_5"),
                (re.compile(r"Qwen2(\.5)?-VL", re.I), "qwen2_5_vl"), (re.compile(r"gemma-3-\d+b", re.I), "gemma3_vl"),
                (re.compile(r"llava", re.I), "llava"))


def vlm_kind(model_name: str) -> str | None:
    return next((kind for pattern, kind in VLM_FAMILIES if pattern.search(str(model_name))), None)


def tiny_vlm(folder: Path, kind: str) -> Path:
    """A tiny random vision-language model of `kind`, its tokenizer the chat one plus the family's vision tokens."""
    sys.path.insert(0, str(ROOT))
    from steadytune.model.tiny import build_chat_tokenizer
    from steadytune.model.tiny_vlm import save_tiny_vlm

    return save_tiny_vlm(folder, kind, tokenizer=build_chat_tokenizer("bytelevel"))


# LLaMA-Factory's demo images (data/mllm_demo_data/*.jpg) are not in the fixtures: drawn stand-ins take their names.
DEMO_IMAGES = ("mllm_demo_data/1.jpg", "mllm_demo_data/2.jpg", "mllm_demo_data/3.jpg")


def draw_demo_images(data: Path) -> None:
    from PIL import Image, ImageDraw

    for k, name in enumerate(DEMO_IMAGES):
        image = Image.new("RGB", (96, 64), (240, 240 - 60 * k, 200))
        draw = ImageDraw.Draw(image)
        draw.rectangle([10 + 10 * k, 10, 50, 50], fill=(200, 40, 40 + 80 * k))
        draw.ellipse([50, 20, 90, 60], fill=(40, 60 * k, 220))
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        image.save(data / name)


# Hub datasets an example names -> a local stand-in the runner writes (no hub here): RLHF-V's image preference pairs
# become drawn squares with a right and a wrong colour, in its columns (sharegpt conversations, chosen, rejected,
# images).
HUB_STAND_INS = {"rlhf_v": "rlhf_v_stand_in.json"}
NOTES["train_lora/qwen3vl_lora_dpo.yaml"] = ("dataset rlhf_v (llamafactory/RLHF-V on the hub) stood in for by 12 drawn "
                                             "image preference pairs in its columns")


def write_hub_stand_ins(data: Path) -> None:
    """The stand-in files, and dataset_info.json (LF's, copied) with each stood-in entry pointing at its file."""
    from PIL import Image

    rows = []
    colours = [((220, 30, 30), "red", "blue"), ((30, 30, 220), "blue", "green"), ((30, 180, 30), "green", "red")]
    for i in range(12):
        colour, right, wrong = colours[i % 3]
        name = f"rlhf_v_stand_in/{i}.png"
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (48 + 16 * (i % 2), 48), colour).save(data / name)
        rows.append({"conversations": [{"from": "human", "value": "<image>What colour is the square?"}],
                     "chosen": {"from": "gpt", "value": f"The square is {right}."},
                     "rejected": {"from": "gpt", "value": f"The square is {wrong}."}, "images": [name]})
    (data / HUB_STAND_INS["rlhf_v"]).write_text(json.dumps(rows), encoding="utf-8")
    info_file = data / "dataset_info.json"
    info = json.loads(info_file.read_text(encoding="utf-8"))
    for name, file in HUB_STAND_INS.items():
        entry = {k: v for k, v in info[name].items() if not k.endswith("_hub_url")}
        info[name] = {**entry, "file_name": file}
    info_file.unlink()   # a link to LF's file: replaced by the copy
    info_file.write_text(json.dumps(info, indent=1, ensure_ascii=False), encoding="utf-8")


def first_error(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("error:") or "not available in this build" in line:
            return line.removeprefix("error:").strip()
    tail = [line for line in output.splitlines() if line.strip()]
    return ("(no error line) " + tail[-1]) if tail else "(no output)"


def render(results: list[dict], args) -> int:
    """docs/lf_examples.md from the results; -> how many ran."""
    runs = sum(r["runs"] for r in results)
    gpu_only = sum(verdict(r) == "needs a GPU" for r in results)
    lines = [
        "# LLaMA-Factory's examples with steadytune",
        "",
        f"Every config under LLaMA-Factory's `examples/` (hiyouga/LLaMA-Factory at ff6d4d12eeb0), run by "
        f"`python tools/run_lf_examples.py` with only `model_name_or_path` (a tiny random Qwen2 with a tokenizer "
        f"that knows every template's special tokens; a vision-language model's examples get a tiny random model of "
        f"its family, Qwen3-VL, Qwen3.5 or Qwen2.5-VL, with the same tokenizer plus the family's vision tokens, and drawn "
        f"images stand in for LLaMA-Factory's demo images, which the fixtures lack) and `dataset_dir` (LLaMA-Factory's "
        f"`data/`) changed (`chat` gets one question on stdin, after `/image` for a vision-language model; "
        f"LLaMA-Factory's v1 files also find its `data/v1_*.yaml` where they run, and "
        f"`v1/train_lora/train_lora_dpo.yaml` gets `stage=dpo`, as v1's `dpo` command; files that name datasets no "
        f"folder here holds get LLaMA-Factory's demo rows or drawn ones as stand-ins, said in their row; the Ray file "
        f"runs with USE_RAY=1, as LLaMA-Factory runs it), on a "
        f"CPU" + (f", each training run cut to `max_steps={args.max_steps}` (and at most 16 generated tokens) to "
                  f"keep the table's CPU time short" if args.max_steps else "") +
        f". **{runs} of {len(results)} run**; {gpu_only} more need a GPU (on this CPU they stop at start saying "
        f"what for); the others stop at start with the message shown (nothing is silently ignored). accelerate/FSDP configs and `extras/multi_tokens/tokens_cfg.yaml` are not run configs "
        f"and are left out.",
        "",
        "| example | command | result | why / note |",
        "|---|---|---|---|",
    ]
    for r in results:
        why = r["why"] if not r["runs"] else r.get("note", "")
        why = re.sub(r"\S*/examples/" + re.escape(r["example"]) + r": ", "", why)   # the file names itself
        why = re.sub(r"/tmp/lf_examples_\w+/tiny-model", "<tiny model>", why)
        why = why.replace("|", "\\|")
        if r["example"] in NOTES:
            why = f"{why}; {NOTES[r['example']]}" if why else NOTES[r["example"]]
        lines.append(f"| `{r['example']}` | {r['command']} | {verdict(r)} | {why} |")
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, default=DEFAULT_EXAMPLES)
    parser.add_argument("--only", default="", help="run only the files whose path starts with one of these "
                                                   "(comma list; list a training file too when a later one reads its adapter)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per example")
    parser.add_argument("--max-steps", type=int, default=5,
                        help="cut each training run to this many steps (0: the file's own length); predict runs "
                             "generate at most 16 tokens then: a run that starts and steps shows the file is accepted")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "lf_examples.md")
    parser.add_argument("--render-only", action="store_true", help="rewrite the table from its .json, run nothing")
    parser.add_argument("--ray-path", help="a folder holding Ray (pip install --target DIR ray), put on PYTHONPATH "
                                           "for the Ray example only")
    parser.add_argument("--gptq-path", help="a folder holding GPTQModel and its dependencies, put on PYTHONPATH for the "
                                            "GPTQ export only (it must not reach the other examples: peft refuses "
                                            "some GPTQModel versions at import)")
    args = parser.parse_args()
    if args.render_only:
        render(json.loads(args.output.with_suffix(".json").read_text(encoding="utf-8")), args)
        return 0

    files = sorted((p for p in args.examples.rglob("*.yaml")
                    if not str(p.relative_to(args.examples)).startswith(NOT_RUN_CONFIGS)),
                   key=lambda p: sort_key(args.examples, p))
    prefixes = tuple(x for x in args.only.split(",") if x) or ("",)
    files = [p for p in files if str(p.relative_to(args.examples)).startswith(prefixes)]
    work = Path(tempfile.mkdtemp(prefix="lf_examples_"))
    model = tiny_model(work / "tiny-model")
    # Run where LLaMA-Factory's users run: a folder with its examples/ (relative paths such as
    # examples/deepspeed/ds_z3_config.json resolve); outputs (saves/...) land in this temporary folder.
    (work / "examples").symlink_to(args.examples.resolve())
    data_dir = args.examples.parent / "data"
    # v1 files name data/v1_*.yaml relative to where they run, and those name data/*.json: LF's data/ with them
    (work / "data").mkdir()
    for f in data_dir.iterdir():
        (work / "data" / f.name).symlink_to(f.resolve())
    for f in V1_DATA.iterdir():
        (work / "data" / f.name).write_bytes(f.read_bytes())
    if not (work / "data" / DEMO_IMAGES[0]).exists():
        draw_demo_images(work / "data")
    write_hub_stand_ins(work / "data")
    stand_in_pair_data(work / "data", data_dir)
    add_stand_in_datasets(work / "data")
    vlm_stand_ins: dict[str, Path] = {}
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    results = []
    for path in files:
        relative = str(path.relative_to(args.examples))
        settings = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        # A model that an earlier example trained (saves/...) stays; a hub model becomes the tiny stand-in.
        own_output = str(settings.get("model_name_or_path", "")).startswith("saves/")
        if relative in V1_STAGE:
            command_stage = [f"stage={V1_STAGE[relative]}"]
        else:
            command_stage = []
        command = [sys.executable, "-m", "steadytune", command_for(relative), str(path),
                   f"dataset_dir={work / 'data'}", *command_stage]
        if relative in RAY_EXAMPLES:
            command.append(RAY_EXAMPLES[relative])
        kind = vlm_kind(settings.get("model_name_or_path") or settings.get("model") or "")
        if kind is not None and not own_output:
            if kind not in vlm_stand_ins:
                vlm_stand_ins[kind] = tiny_vlm(work / f"tiny-{kind}", kind)
            command.append(f"model_name_or_path={vlm_stand_ins[kind]}")
        elif relative in STAND_IN_SHAPES:
            shape = STAND_IN_SHAPES[relative]
            folder = work / ("tiny-" + "-".join(f"{k}{v}" for k, v in shape.items()))
            command.append(f"model_name_or_path={folder if folder.exists() else tiny_model(folder, **shape)}")
        elif not own_output:
            command.append(f"model_name_or_path={model}")
        if settings.get("export_dir") and (work / settings["export_dir"]).exists():
            # Two merge examples write the same export_dir: each gets it empty, as if run alone.
            shutil.rmtree(work / settings["export_dir"])
        if args.max_steps and command_for(relative) == "train":
            command += [f"max_steps={args.max_steps}", "max_new_tokens=16"]
        # chat reads prompts from stdin when it is not a terminal: one question, then end of input (a vision-language
        # model's with an image attached first)
        prompt = "Hello, who are you?\n" if command_for(relative) == "chat" else None
        if prompt and kind is not None:
            prompt = f"/image {work / 'data' / DEMO_IMAGES[0]}\nWho are they?\n"
        if prompt:
            command += ["max_new_tokens=16"]
        run_env = env
        extra = args.ray_path if relative in RAY_EXAMPLES else args.gptq_path if settings.get(
            "export_quantization_bit") else None
        if extra:
            run_env = dict(env, PYTHONPATH=os.pathsep.join([env["PYTHONPATH"], extra]))
        if relative in RAY_EXAMPLES:
            run_env = dict(run_env, USE_RAY="1")
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=work, env=run_env, capture_output=True, text=True, timeout=args.timeout,
                                  input=prompt, stdin=None if prompt else subprocess.DEVNULL)
            code, output, answer = done.returncode, done.stdout + done.stderr, done.stdout
        except subprocess.TimeoutExpired as e:
            code, output, answer = -1, f"timed out after {args.timeout} s\n{(e.stdout or b'')!r}", ""
        seconds = time.perf_counter() - start
        result = {"example": relative, "command": command_for(relative), "exit_code": code,
                  "seconds": round(seconds, 1), "runs": code == 0, "why": "" if code == 0 else first_error(output)}
        if code == 0:
            # Ray prefixes its workers' lines with "(_RankProcess pid=N)" in colour: read past it
            lines = [re.sub(r"^(\x1b\[[0-9;]*m)?\(\w+ pid=\d+(, ip=[^)]*)?\)(\x1b\[[0-9;]*m)?\s*", "",
                            line.split("\r")[-1].strip()) for line in output.splitlines()]
            done_line = next((line for line in lines if line.startswith("done:")), "")
            scores = " ".join(line.strip(",") for line in lines if line.startswith('"predict_'))  # predict runs
            merged = next((line for line in lines if line.startswith("merged model in")), "")
            quantised = next((line for line in lines if line.startswith("quantised:")), "")
            merged = f"{merged}; {quantised}" if merged and quantised else merged
            said = next((line for line in answer.splitlines() if line.strip() and not line.startswith("(image")),
                        "") if command_for(relative) == "chat" else ""
            plain = [x for x in lines if x and "it/s]" not in x and "%|" not in x]
            result["note"] = (done_line or (f"predicted; {scores}" if scores else "") or merged
                              or (f"answered one question{' about an image' if kind else ''} ({len(said)} characters; "
                                  "the model is random)" if said else "") or (plain[-1] if plain else ""))
            if kind is not None and not own_output:
                result["note"] += f"; on a tiny {kind} stand-in with drawn images for LLaMA-Factory's demo images"
        results.append(result)
        print(f"{'runs' if code == 0 else 'NOT  '} {relative:55} {seconds:6.1f} s  {result['why'][:110]}", flush=True)

    args.output.parent.mkdir(parents=True, exist_ok=True)
    earlier = args.output.with_suffix(".json")
    if args.only and earlier.is_file():  # a partial re-run: keep the other examples' results
        ran = {r["example"] for r in results}
        results = [next((r for r in results if r["example"] == old["example"]), old)
                   for old in json.loads(earlier.read_text(encoding="utf-8"))] + \
                  [r for r in results if r["example"] not in {o["example"] for o in json.loads(earlier.read_text())}]
        assert ran <= {r["example"] for r in results}
    earlier.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    runs = render(results, args)
    print(f"{runs} of {len(results)} run; table in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
