"""LLaMA-Factory behaviours beyond templates: KTO rows under sft, stage pt, predict-only runs, openai tool calls,
tool_format, and the real LF example files that must run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import LF_FIXTURES, needs_shared

from steadytune.cli import main as cli_main
from steadytune.config import load_config
from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.prepare import prepare_datasets
from steadytune.model.tiny import build_chat_tokenizer, save_tiny_model


@pytest.fixture(scope="module")
def tok():
    return build_chat_tokenizer("bytelevel")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tok) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2", "qwen2", tokenizer=tok)


def write_json(path: Path, rows) -> Path:
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return path


def test_kto_rows_are_left_out_under_sft(tok, tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
             "label": i % 2 == 0} for i in range(4)]
    rows.append({"messages": [{"role": "user", "content": "plain"}, {"role": "assistant", "content": "row"}]})
    write_json(tmp_path / "kto.json", rows)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"kto": {
        "file_name": "kto.json", "formatting": "sharegpt", "columns": {"messages": "messages", "kto_tag": "label"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    data = prepare_datasets(load_config(None, dict(dataset="kto", dataset_dir=str(tmp_path), template="qwen")), tok)
    assert len(data.train) == 1   # the desirable and the undesirable KTO rows both go, as in LLaMA-Factory
    [(reason, count)] = [(k, v) for k, v in data.stats["dropped"].items() if "kto_tag" in k]
    assert count == 4


def test_openai_tool_calls_and_results_as_llamafactory(tok, tmp_path):
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    rows = [{"messages": [{"role": "user", "content": "Weather in Paris and Rome?"},
                          {"role": "assistant", "content": "", "tool_calls": [call, call]},
                          {"role": "tool", "content": "21 C"}, {"role": "tool", "content": "25 C"},
                          {"role": "assistant", "content": "21 and 25 degrees."}],
             "tools": [{"name": "get_weather", "description": "Weather.", "parameters": {
                 "type": "object", "properties": {"city": {"type": "string"}}}}]}]
    path = write_json(tmp_path / "calls.json", rows)
    data = prepare_datasets(load_config(None, dict(dataset=str(path), template="qwen")), tok)
    text = tok.decode(data.train[0]["input_ids"])
    assert text.count('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>') == 2
    # consecutive tool results become one observation turn, joined as LLaMA-Factory joins them
    assert "<tool_response>\n21 C\n</tool_response>\n<tool_response>\n25 C\n</tool_response>" in text
    assert "# Tools" in text and text.count("<|im_start|>system") == 1


def test_tool_format_key_writes_calls_in_another_format(tok, tmp_path):
    rows = [{"conversations": [{"from": "human", "value": "Weather?"},
                               {"from": "function_call", "value": '{"name": "w", "arguments": {"c": 1}}'},
                               {"from": "observation", "value": "sunny"}, {"from": "gpt", "value": "Sunny."}],
             "tools": '[{"name": "w", "description": "d", "parameters": {"type": "object", "properties": {}}}]'}]
    write_json(tmp_path / "t.json", rows)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"t": {
        "file_name": "t.json", "formatting": "sharegpt", "columns": {"messages": "conversations", "tools": "tools"}}}))
    keys = dict(dataset="t", dataset_dir=str(tmp_path), template="qwen")
    own = tok.decode(prepare_datasets(load_config(None, keys), tok).train[0]["input_ids"])
    other = tok.decode(prepare_datasets(load_config(None, dict(keys, tool_format="default")), tok).train[0]["input_ids"])
    assert "<tool_call>" in own and "Action: w\nAction Input: {\"c\": 1}" in other
    assert "You have access to the following tools" in other


def test_pretrain_stage_on_a_txt_file(tiny_model, tmp_path, tok):
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(f"The quick brown fox number {i} jumps over the lazy dog." for i in range(60)),
                    encoding="utf-8")
    cfg = load_config(None, dict(stage="pt", dataset=str(text), cutoff_len=32, template="qwen"))
    data = prepare_datasets(cfg, tok)
    assert data.train and all(len(e["input_ids"]) == 32 and e["labels"] == e["input_ids"] for e in data.train)
    stream = [t for e in data.train for t in e["input_ids"]]
    assert stream.count(tok.convert_tokens_to_ids("<|im_end|>")) >= 55   # each text ends with the template's eos
    explicit = prepare_datasets(load_config(None, dict(stage="pt", dataset=str(text), cutoff_len=32,
                                                       packing=True)), tok)
    assert {len(e["input_ids"]) for e in explicit.train} == {31}  # LLaMA-Factory: explicit packing -> cutoff_len - 1
    out = tmp_path / "pt"
    code = cli_main(["train", "--force", str(_yaml(tmp_path / "pt.yaml", model_name_or_path=str(tiny_model),
                                                   stage="pt", dataset=str(text), cutoff_len=32, max_steps=3,
                                                   per_device_train_batch_size=4, output_dir=str(out),
                                                   logging_steps=1))])
    assert code == 0
    run_config = yaml.safe_load((out / "run_config.yaml").read_text(encoding="utf-8"))
    assert "stage pt" in run_config["decisions"]["packing"]["reason"]
    assert (out / "adapter_model.safetensors").is_file()


def _yaml(path: Path, **keys) -> Path:
    path.write_text(yaml.safe_dump(keys, allow_unicode=True), encoding="utf-8")
    return path


def test_predict_only_run_like_nlg_eval(tiny_model, tmp_path, capsys):
    """extras/nlg_eval: no dataset, do_predict + predict_with_generate on eval_dataset with a trained adapter."""
    rows = [{"instruction": f"Say {w}.", "input": "", "output": w} for w in ("yes", "no", "maybe", "ok")]
    path = write_json(tmp_path / "rows.json", rows)
    adapter = tmp_path / "adapter"
    assert cli_main(["train", "--force", str(_yaml(tmp_path / "sft.yaml", model_name_or_path=str(tiny_model),
                                                   dataset=str(path), template="qwen", max_steps=2,
                                                   output_dir=str(adapter)))]) == 0
    out = tmp_path / "predict"
    code = cli_main(["train", str(_yaml(tmp_path / "predict.yaml", model_name_or_path=str(tiny_model),
                                        adapter_name_or_path=str(adapter), stage="sft", do_predict=True,
                                        finetuning_type="lora", eval_dataset=str(path), template="qwen",
                                        cutoff_len=256, max_samples=4, overwrite_cache=True,
                                        output_dir=str(out), overwrite_output_dir=True, per_device_eval_batch_size=2,
                                        predict_with_generate=True, max_new_tokens=4))])
    assert code == 0
    lines = [json.loads(x) for x in (out / "generated_predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    # the reference is the answer slot decoded without special tokens, so Qwen's "<|im_end|>\n" leaves "\n" (as LF)
    assert [x["label"] for x in lines] == ["yes\n", "no\n", "maybe\n", "ok\n"]
    assert all(x["prompt"].endswith("<|im_start|>assistant\n") for x in lines)
    results = json.loads((out / "eval_results.json").read_text(encoding="utf-8"))
    assert {"predict_bleu-4", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l"} <= set(results)
    assert not (out / "adapter_model.safetensors").exists()   # nothing was trained
    # greedy here, and said at run time with LLaMA-Factory's sampling settings (tests/test_lf_fidelity.py: its golden)
    assert results["decoding"].startswith("greedy")
    assert "differs from LLaMA-Factory's do_predict, which samples (do_sample true, temperature 0.95, top_p 0.7" in \
        capsys.readouterr().out


@needs_shared
@pytest.mark.parametrize("example", ["train_lora/qwen3_lora_sft.yaml", "train_lora/qwen3_lora_pretrain.yaml",
                                     "extras/nlg_eval/llama3_lora_predict.yaml", "train_lora/qwen3_preprocess.yaml"])
def test_llamafactory_examples_load(example):
    """These LF files are accepted as they are (their runs: tools/run_lf_examples.py, docs/lf_examples.md)."""
    cfg = load_config(LF_FIXTURES / "examples" / example)
    assert cfg.method.stage in ("sft", "pt")


@needs_shared
def test_c4_demo_pretrain_blocks(tok):
    cfg = load_config(None, dict(stage="pt", dataset="c4_demo", dataset_dir=str(LF_FIXTURES / "data"),
                                 cutoff_len=256, max_samples=20, template="qwen3_nothink"))
    data = prepare_datasets(cfg, tok)
    assert len(data.train) > 10 and all(len(e["input_ids"]) == 256 for e in data.train)
    assert all(IGNORE_INDEX not in e["labels"] for e in data.train)   # loss on every token


def test_pre_quantised_checkpoints_are_refused(tiny_model, tmp_path):
    """train_qlora/llama3_lora_sft_awq/gptq/aqlm name pre-quantised models: refused at start, as quantization_bit is."""
    import shutil

    from steadytune.errors import UserError
    from steadytune.model.load import load_model_and_tokenizer
    folder = tmp_path / "awq"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="pre-quantised checkpoint \\(quant_method awq\\)"):
        load_model_and_tokenizer(load_config(None, {"model_name_or_path": str(folder)}).model)
