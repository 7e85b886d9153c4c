"""Make the golden token ids in tests/golden/ with LLaMA-Factory itself (not run in CI).

The ids are facts about LLaMA-Factory's behaviour; our own code (steadytune/data/templates.py, encode.py,
pretrain.py) is checked against them by tests/test_template_golden.py. Two steps, two environments:

    # 1. in steadytune's environment: the two tiny tokenizers the ids are made with (saved, so the files stay
    #    valid however `tokenizers` trains in later versions)
    python tools/make_template_golden.py tokenizers

    # 2. in a throwaway environment with LLaMA-Factory (we used hiyouga/LLaMA-Factory at ff6d4d12eeb0,
    #    0.9.6.dev0, with transformers 5.8.0):
    python -m venv --system-site-packages /tmp/lfenv
    /tmp/lfenv/bin/pip install --no-deps /path/to/LLaMA-Factory && /tmp/lfenv/bin/pip install "transformers==5.8.0" \
        "datasets<=4.0.0" "accelerate<=1.11.0" "peft==0.18.1" "trl<=0.24.0" omegaconf fire "tyro<0.9.0" \
        jieba rouge-chinese nltk sentencepiece tiktoken pydantic einops pandas scipy protobuf av
    /tmp/lfenv/bin/python tools/make_template_golden.py golden

`golden NAME...` writes only those templates' files (tests/golden/templates/llava.json was made so, with
LLaMA-Factory 0.9.5 and its transformers 5.6.0: `pip install llamafactory==0.9.5` in the throwaway environment).
Step 2 writes tests/golden/templates/<name>.json (every conversation x variant x tokenizer: input_ids, labels),
tests/golden/templates/conversations.json (the inputs), tests/golden/pretrain.json (stage pt blocks) and
tests/golden/textmetrics.json (BLEU-4 / ROUGE of fixed predictions by LLaMA-Factory's ComputeSimilarity) and
tests/golden/lf_defaults.json (the default of every key LLaMA-Factory's argument classes accept).
"""

from __future__ import annotations

import copy
import importlib.machinery
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
TOKENIZERS = {"bytelevel": GOLDEN / "tokenizers" / "bytelevel", "metaspace": GOLDEN / "tokenizers" / "metaspace"}

# The template names steadytune accepts (data/templates.py TEMPLATES, plus auto through a chat_template).
TEMPLATE_NAMES = ["empty", "default", "alpaca", "vicuna", "chatml", "qwen", "qwen3", "qwen3_nothink", "qwen2_vl",
                  "qwen3_vl", "qwen3_vl_nothink", "qwen3_5", "qwen3_5_nothink", "qwen3_6", "yi", "intern2", "phi4",
                  "gemma", "gemma3", "llama2", "llama3", "mistral", "deepseek", "deepseek3", "glm4", "llava"]

WEATHER_TOOL = [{"name": "get_weather", "description": "Get the current weather of a city.",
                 "parameters": {"type": "object",
                                "properties": {"city": {"type": "string", "description": "The city name."},
                                               "unit": {"type": "string", "description": "Temperature unit.",
                                                        "enum": ["celsius", "fahrenheit"]}},
                                "required": ["city"]}}]

# Roles as LLaMA-Factory names them; the test maps `function` to steadytune's `function_call`.
CONVERSATIONS = {
    "single": {"system": "", "tools": "", "messages": [
        {"role": "user", "content": "Hi there!"},
        {"role": "assistant", "content": "Hello! How can I help you today?"}]},
    "multi": {"system": "", "tools": "", "messages": [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
        {"role": "user", "content": "这个商品很好吗？"},
        {"role": "assistant", "content": "质量不错，物流很快。"},
        {"role": "user", "content": "Give three tips for staying healthy."},
        {"role": "assistant", "content": "Eat a balanced diet, exercise, and sleep well."}]},
    "system": {"system": "You are a helpful assistant who answers briefly.", "tools": "", "messages": [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi! How can I assist you?"}]},
    "tool": {"system": "", "tools": json.dumps(WEATHER_TOOL), "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "function", "content": json.dumps({"name": "get_weather",
                                                    "arguments": {"city": "Paris", "unit": "celsius"}})},
        {"role": "observation", "content": json.dumps({"temperature": 21, "condition": "sunny"})},
        {"role": "assistant", "content": "It is 21 degrees and sunny in Paris."}]},
    "empty_system": {"system": "", "tools": "[]", "messages": [
        {"role": "user", "content": "Hi there!"},
        {"role": "assistant", "content": "Hello!"}]},
    "thought": {"system": "", "tools": "", "messages": [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "<think>\nAdd the numbers.\n</think>\n\nThe answer is 4."},
        {"role": "user", "content": "And 3 + 3?"},
        {"role": "assistant", "content": "<think>\nAgain.\n</think>\n\nThe answer is 6."}]},
}

# Data keys that change the encoding; each variant is run on the conversations listed.
# The metaspace tokenizer runs the plain and cutoff variants only (the others test masking, not tokenisation).
METASPACE_VARIANTS = {"plain", "cutoff_24"}
VARIANTS = {
    "plain": ({}, list(CONVERSATIONS)),
    "mask_history": ({"mask_history": True}, ["multi", "thought", "tool"]),
    "train_on_prompt": ({"train_on_prompt": True}, ["multi", "tool"]),
    "cutoff_24": ({"cutoff_len": 24}, ["multi", "system", "tool"]),
    "no_thinking": ({"enable_thinking": False}, ["multi", "thought"]),
    "tool_format_default": ({"tool_format": "default"}, ["tool"]),
    "default_system": ({"default_system": "Be nice."}, ["single", "system"]),
}
REASONING_ONLY = {"no_thinking"}
PREDICT_VARIANTS = {"plain", "cutoff_24", "no_thinking"}  # also encoded as do_predict encodes them
FIXED_DATE = "26 Jul 2024"  # Llama 3's tool header carries today's date; the test pins the same one

# A Qwen2.5-style chat template (with a default system prompt) for `template: auto`.
CHAT_TEMPLATE = ("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
                 "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
                 "{%- endif %}{%- for message in messages %}{%- if message['role'] != 'system' %}"
                 "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}"
                 "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def compact(ids: list[int], labels: list[int]) -> dict:
    """input_ids plus the labels as a mask string ('1': the label is the input id, '0': ignored (-100)) and, for the
    few positions where a label is another id (efficient-eos templates), those ids by position."""
    mask = "".join("0" if lab == -100 else "1" for lab in labels)
    other = {str(i): lab for i, (tok, lab) in enumerate(zip(ids, labels)) if lab not in (-100, tok)}
    return {"input_ids": ids, "mask": mask, **({"other_labels": other} if other else {})}


def all_text() -> str:
    """Every character the golden inputs contain (the metaspace tokenizer has no byte fallback)."""
    from_tools = json.dumps(WEATHER_TOOL, ensure_ascii=False) + "你是一个名为 ChatGLM 的人工智能助手。基于智谱公司训练语言模型开发，任务针对用户问题和要求提供适当答复支持。可用工具在调用上述函数时，请使用格式表示参数。书生·浦语上海实验室中文"
    return "".join(m["content"] for c in CONVERSATIONS.values() for m in c["messages"]) + from_tools + \
        "｜<>[]{}()/|=-_:;#`>0123456789%" + "".join(chr(c) for c in range(32, 127))


def make_tokenizers() -> None:
    sys.path.insert(0, str(ROOT))
    from steadytune.model.tiny import build_chat_tokenizer

    for style, folder in TOKENIZERS.items():
        folder.mkdir(parents=True, exist_ok=True)
        build_chat_tokenizer(style, extra_text=all_text()).save_pretrained(folder)
        print(f"wrote {folder}")


def _import_llamafactory():
    # torchaudio's native library does not load against this machine's torch build, and nothing on the text path
    # uses it (LLaMA-Factory imports it at the top of mm_plugin.py for audio inputs only): an empty module stands in.
    try:
        import torchaudio  # noqa: F401
    except Exception:
        stand_in = types.ModuleType("torchaudio")
        stand_in.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
        sys.modules["torchaudio"] = stand_in
    import llamafactory.data.template as lf_template
    import llamafactory.data.tool_utils as lf_tools

    class _Pinned:  # Llama 3's tool header: a fixed date instead of today's
        @staticmethod
        def now():
            from datetime import datetime
            return datetime.strptime(FIXED_DATE, "%d %b %Y")

    lf_tools.datetime = _Pinned
    return lf_template


def make_golden(only: list[str] | None = None) -> None:
    """Every template's golden file, the stage pt blocks; `only`: just these templates' files."""
    import llamafactory
    from transformers import AutoTokenizer

    lf_template = _import_llamafactory()
    from llamafactory.data.mm_plugin import get_mm_plugin
    from llamafactory.data.processor.pretrain import PretrainDatasetProcessor
    from llamafactory.data.processor.supervised import SupervisedDatasetProcessor
    from llamafactory.data.processor.unsupervised import UnsupervisedDatasetProcessor
    from llamafactory.hparams import DataArguments

    pristine = copy.deepcopy(lf_template.TEMPLATES)
    out_dir = GOLDEN / "templates"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "conversations.json").write_text(json.dumps(
        {"conversations": CONVERSATIONS, "variants": {k: v[0] for k, v in VARIANTS.items()},
         "chat_template": CHAT_TEMPLATE, "llama3_date": FIXED_DATE}, ensure_ascii=False, indent=1), encoding="utf-8")
    source = f"LLaMA-Factory {llamafactory.__version__ if hasattr(llamafactory, '__version__') else ''}".strip()

    for name in only or TEMPLATE_NAMES + ["auto"]:
        result = {"template": name, "made_with": source, "cases": {}}
        for style, folder in TOKENIZERS.items():
            for variant, (keys, conversations) in VARIANTS.items():
                reasoning = name != "auto" and isinstance(pristine[name], lf_template.ReasoningTemplate)
                if (variant in REASONING_ONLY and not reasoning) or \
                        (style == "metaspace" and variant not in METASPACE_VARIANTS):
                    continue
                for conv_name in conversations:
                    conv = CONVERSATIONS[conv_name]
                    tokenizer = AutoTokenizer.from_pretrained(folder)
                    if name == "auto":
                        tokenizer.chat_template = CHAT_TEMPLATE
                    lf_template.TEMPLATES.clear()
                    lf_template.TEMPLATES.update(copy.deepcopy(pristine))
                    args = {"template": None if name == "auto" else name, "cutoff_len": 4096, **keys}
                    data_args = DataArguments(**args)
                    key = f"{style}/{variant}/{conv_name}"
                    try:
                        template = lf_template.get_template_and_fix_tokenizer(tokenizer, data_args)
                        # Vision templates (gemma3, qwen2_vl, qwen3_vl, qwen3_5, ...) refuse to run without an image
                        # processor even for text; their text side is LLaMA-Factory's template code all the same,
                        # so the text-only plugin stands in (with no images it changes no id).
                        template.mm_plugin = get_mm_plugin(name="base")
                        processor = SupervisedDatasetProcessor(template=template, tokenizer=tokenizer,
                                                               processor=None, data_args=data_args)
                        messages = conv["messages"]
                        ids, labels = processor._encode_data_example(messages[:-1], messages[-1:], conv["system"],
                                                                     conv["tools"], [], [], [])
                    except (ValueError, RuntimeError) as e:  # e.g. train_on_prompt with an efficient-eos template
                        result["cases"][key] = {"error": f"{type(e).__name__}: {e}"}
                        continue
                    result["cases"][key] = compact(ids, labels)
                    if variant in PREDICT_VARIANTS:  # do_predict's encoding: prompt up to the last answer
                        prompt_ids, answer_ids = UnsupervisedDatasetProcessor(
                            template=template, tokenizer=tokenizer, processor=None, data_args=data_args
                        )._encode_data_example(messages[:-1], messages[-1:], conv["system"], conv["tools"], [], [], [])
                        result["cases"][f"{style}/{variant}/{conv_name}/predict"] = {"prompt_ids": prompt_ids,
                                                                                     "answer_ids": answer_ids}
        path = out_dir / f"{name}.json"
        path.write_text(json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {path} ({len(result['cases'])} cases)")
    if only:
        return

    # stage pt: LLaMA-Factory concatenates texts (each + eos) and cuts blocks of cutoff_len (packing, the pt
    # default), or truncates each text alone (packing: false); through datasets.map, so per shard and batch.
    from datasets import Dataset

    texts = [line for line in (ROOT.parent / "shared" / "fixtures" / "llamafactory" / "data" / "wiki_demo.txt")
             .read_text(encoding="utf-8").splitlines()[:5]]
    texts = [t[:300] for t in texts] + ["short one", "Hi there!", "", "The capital of France is Paris."]
    pretrain = {"texts": texts, "cases": {}}
    for style, folder in TOKENIZERS.items():
        for packing in (None, True, False):
            for template_name in ("empty", "llama3", "qwen"):
                for batch_size, num_proc in ((1000, None), (3, 2)):
                    tokenizer = AutoTokenizer.from_pretrained(folder)
                    lf_template.TEMPLATES.clear()
                    lf_template.TEMPLATES.update(copy.deepcopy(pristine))
                    data_args = DataArguments(template=template_name, cutoff_len=32, packing=packing,
                                              preprocessing_batch_size=batch_size, preprocessing_num_workers=num_proc)
                    if data_args.packing is None:  # what hparams/parser.py does for stage pt, after __post_init__
                        data_args.packing = True
                    lf_template.get_template_and_fix_tokenizer(tokenizer, data_args)  # the pt workflow does this
                    processor = PretrainDatasetProcessor(template=None, tokenizer=tokenizer, processor=None,
                                                         data_args=data_args)
                    dataset = Dataset.from_dict({"_prompt": [[{"role": "user", "content": t}] for t in texts]})
                    blocks = dataset.map(processor.preprocess_dataset, batched=True, batch_size=batch_size,
                                         num_proc=num_proc, remove_columns=["_prompt"])["input_ids"]
                    key = f"{style}/packing={packing}/template={template_name}/batch={batch_size}/workers={num_proc}"
                    pretrain["cases"][key] = {"cutoff_len": data_args.cutoff_len, "input_ids": [list(b) for b in blocks]}
    (GOLDEN / "pretrain.json").write_text(json.dumps(pretrain, ensure_ascii=False, separators=(",", ":")) + "\n",
                                          encoding="utf-8")
    print(f"wrote {GOLDEN / 'pretrain.json'}")


# Predictions and references for BLEU-4 / ROUGE: Chinese (jieba segments it), English, mixed, empty, identical.
METRIC_PAIRS = [
    ("今天天气很好，我们去公园散步吧。", "今天天气不错，我们一起去公园散步。"),
    ("这个商品质量很好，物流也很快。", "这个商品质量很好，物流也很快。"),
    ("太差了，再也不买了", "质量不错，下次还来"),
    ("The capital of France is Paris.", "Paris is the capital of France."),
    ("Eat a balanced diet and exercise.", "Eat a balanced diet, exercise regularly, and sleep well."),
    ("GPU训练很快，LoRA只更新少量参数。", "LoRA 只更新少量参数，所以 GPU 训练很快。"),
    ("", "非空的参考答案"),
    ("好", "好"),
    ("我爱北京", "我爱上海"),
]


def make_metrics_golden(tokenizer_folder: Path) -> None:
    """LLaMA-Factory's ComputeSimilarity on fixed texts (ids through the byte-level tokenizer, which round-trips
    these strings exactly)."""
    import numpy as np
    from transformers import AutoTokenizer, EvalPrediction

    _import_llamafactory()
    from llamafactory.train.sft.metric import ComputeSimilarity

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)

    def as_array(texts: list[str]):
        ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
        assert [tokenizer.decode(x, skip_special_tokens=True) for x in ids] == texts
        width = max(len(x) for x in ids)
        return np.array([x + [-100] * (width - len(x)) for x in ids])

    preds, refs = [p for p, _ in METRIC_PAIRS], [r for _, r in METRIC_PAIRS]
    scores = ComputeSimilarity(tokenizer)(EvalPrediction(as_array(preds), as_array(refs)))
    per_example = []
    for pred, ref in METRIC_PAIRS:
        one = ComputeSimilarity(tokenizer)(EvalPrediction(as_array([pred]), as_array([ref])))
        per_example.append({"predict": pred, "label": ref, **one})
    out = {"made_with": "LLaMA-Factory train/sft/metric.py ComputeSimilarity (jieba, rouge-chinese, nltk)",
           "mean": scores, "examples": per_example}
    (GOLDEN / "textmetrics.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN / 'textmetrics.json'}")


def make_defaults_golden() -> None:
    """Every key of LLaMA-Factory's argument dataclasses with its default (TrainingArguments' from transformers)."""
    import dataclasses
    import enum

    _import_llamafactory()
    from llamafactory.hparams import DataArguments, FinetuningArguments, GeneratingArguments, ModelArguments
    from llamafactory.hparams.training_args import TrainingArguments
    import transformers

    keys = {}
    for cls in (ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments, TrainingArguments):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = "<required>"
            if isinstance(default, enum.Enum):
                default = default.value
            try:
                json.dumps(default)
            except TypeError:
                default = repr(default)
            keys.setdefault(f.name, {"default": default, "class": cls.__name__})
    out = {"made_with": f"LLaMA-Factory hparams dataclasses, transformers {transformers.__version__}", "keys": keys}
    (GOLDEN / "lf_defaults.json").write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN / 'lf_defaults.json'} ({len(keys)} keys)")


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else ""
    if step == "tokenizers":
        make_tokenizers()
    elif step == "golden" and len(sys.argv) > 2:   # golden NAME...: only these templates' files (a template added)
        make_golden(sys.argv[2:])
    elif step == "golden":
        make_golden()
        make_metrics_golden(TOKENIZERS["bytelevel"])
        make_defaults_golden()
    else:
        sys.exit(__doc__)
