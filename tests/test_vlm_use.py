"""Using a vision-language model: prompts with images encoded as training encodes them, label scoring with each
prompt's images encoded once, generation with images through transformers' generate."""

from __future__ import annotations

import pytest
import torch

from steadytune.config import load_config
from steadytune.errors import DataError
from steadytune.eval.scoring import generate_texts, score_labels
from steadytune.infer.generate import run_template
from steadytune.infer.media import VisionPrompts
from steadytune.model.anatomy import run_body
from steadytune.model.load import load_model_and_tokenizer
from steadytune.model.tiny_vlm import TINY_VLM_KINDS, TINY_VLM_TEMPLATES, save_tiny_vlm
from steadytune.model.vision import type_id_inputs
from vlm_batches import square

COLOURS = [(255, 0, 0), (0, 0, 255), (0, 255, 0)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    return {kind: save_tiny_vlm(root / kind, kind) for kind in TINY_VLM_KINDS}


def loaded(folder, kind):
    cfg = load_config(None, {"model_name_or_path": str(folder), "template": TINY_VLM_TEMPLATES[kind]})
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    model.eval()
    template = run_template(cfg, tokenizer)
    return model, tokenizer, VisionPrompts.for_model(cfg, model, tokenizer, template)


def question(prompts: VisionPrompts, colour, text="What colour is this?"):
    return prompts.encode([{"role": "user", "content": text}], None, [square(colour)], "test")


def label_ids(tokenizer, word):
    return tokenizer(word, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


@pytest.mark.parametrize("kind", TINY_VLM_KINDS)
def test_label_scores_with_images_equal_one_row_at_a_time_and_encode_each_image_once(kind, folders):
    model, tokenizer, prompts = loaded(folders[kind], kind)
    asked = [question(prompts, c) for c in COLOURS]
    labels = [label_ids(tokenizer, "red"), label_ids(tokenizer, "blue")]
    root = model.model.visual if kind.startswith("qwen") else model.model.vision_tower
    images_seen = []
    hook = root.register_forward_hook(lambda module, args, out: images_seen.append(1))
    scores = score_labels(model, [p.ids for p in asked], labels, batch_size=2, pad_token_id=tokenizer.pad_token_id,
                          media=[p.pixels for p in asked])
    hook.remove()
    assert len(images_seen) == 2, "one encoder call per batch of prompts, not one per (prompt, label) row"
    for i, p in enumerate(asked):
        for j, target in enumerate(labels):
            ids = torch.tensor([p.ids + target])
            with torch.no_grad():
                hidden = run_body(model, {"input_ids": ids, **type_id_inputs(model, ids), **p.pixels}).last_hidden_state
                logprobs = torch.log_softmax(model.get_output_embeddings()(hidden[0]).float(), -1)
            alone = sum(float(logprobs[len(p.ids) - 1 + k, t]) for k, t in enumerate(target))
            assert scores[i, j].item() == pytest.approx(alone, abs=1e-4)
    assert not torch.allclose(scores[0], scores[1])   # the image changes the scores


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "gemma3_vl"])
def test_generation_with_images_batched_equals_one_at_a_time(kind, folders):
    model, tokenizer, prompts = loaded(folders[kind], kind)
    asked = [question(prompts, c, text) for c, text in zip(COLOURS, ["Colour?", "What colour is this one?", "Hi"])]
    together = generate_texts(model, tokenizer, [p.ids for p in asked], 6, batch_size=3,
                              media=[p.pixels for p in asked])
    alone = [generate_texts(model, tokenizer, [p.ids], 6, media=[p.pixels])[0] for p in asked]
    assert together == alone


def test_placeholders_are_placed_as_llamafactory_places_them(folders):
    model, tokenizer, prompts = loaded(folders["llava"], "llava")
    implicit = prompts.encode([{"role": "user", "content": "Colour?"}], None, [square(COLOURS[0])], "row 1")
    explicit = prompts.encode([{"role": "user", "content": "<image>Colour?"}], None, [square(COLOURS[0])], "row 1")
    assert implicit.ids == explicit.ids and implicit.ids.count(model.config.image_token_id) == 16
    with pytest.raises(DataError, match="row 2: 2 <image> placeholder"):
        prompts.encode([{"role": "user", "content": "<image><image>Colour?"}], None, [square(COLOURS[0])], "row 2")


def test_a_text_model_has_no_vision_prompts(tmp_path):
    from steadytune.model.tiny import save_tiny_model

    folder = save_tiny_model(tmp_path / "text")
    cfg = load_config(None, {"model_name_or_path": str(folder), "template": "qwen"})
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    assert VisionPrompts.for_model(cfg, model, tokenizer, run_template(cfg, tokenizer)) is None


def test_a_vlm_with_a_text_template_is_refused(folders):
    cfg = load_config(None, {"model_name_or_path": str(folders["qwen2_5_vl"]), "template": "qwen"})
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    with pytest.raises(DataError, match="template: qwen has no image tokens"):
        VisionPrompts.for_model(cfg, model, tokenizer, run_template(cfg, tokenizer))


def test_chat_attaches_images_with_a_command_and_keeps_them_with_their_message(folders, tmp_path):
    """`/image PATH` then a question: the answer is generated over the image; the image stays in the history and the
    next prompt still carries its tokens; /reset forgets it; a missing file is said, the session goes on."""
    import io

    from steadytune.infer.chat import ChatSession
    from steadytune.infer.loading import open_run

    red = tmp_path / "red.png"
    square(COLOURS[0]).save(red)
    run_ = open_run(str(folders["qwen2_5_vl"]), ["template=qwen2_vl", "do_sample=false", "max_new_tokens=3"])
    session = ChatSession.load(run_, quiet=True)
    out = io.StringIO()
    session.loop(io.StringIO(f"/image {red}\nWhat colour?\n/image {tmp_path / 'missing.png'}\nAnd now?\n"), out,
                 interactive=False)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("(image 1 attached") and "image file not found" in lines[2], lines
    image = session.model.config.image_token_id
    ids, pixels = session.prompt("again?")
    assert ids.count(image) == 1 and pixels["pixel_values"].shape[0] == 4   # the first turn's image, still there
    # the same question over the image from a fresh session gives the same first answer (greedy)
    again = ChatSession.load(run_, quiet=True)
    again.pending_images.append(str(red))
    assert "".join(again.answer("What colour?")).replace("\n", " ") == lines[1]
    session.reset()
    assert session.prompt("hi")[1] == {}


def test_chat_of_a_text_model_says_it_takes_no_images(tmp_path):
    import io

    from steadytune.infer.chat import ChatSession
    from steadytune.infer.loading import open_run
    from steadytune.model.tiny import save_tiny_model

    folder = save_tiny_model(tmp_path / "text")
    session = ChatSession.load(open_run(str(folder), ["template=qwen", "max_new_tokens=2"]), quiet=True)
    out = io.StringIO()
    session.loop(io.StringIO("/image x.png\n"), out, interactive=False)
    assert "takes no images" in out.getvalue()


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "gemma3_vl"])
def test_export_merged_reloads_as_a_vlm_and_gives_the_same_logits(kind, folders, tmp_path):
    """A LoRA run (LoRA on the language model, the projector trained in full) exported merged: the folder reloads as
    a vision-language model with its image processor, and its logits over a prompt with an image are the adapter's."""
    from steadytune.cli import main
    from steadytune.config import save_resolved_config
    from steadytune.infer.loading import load_run, open_run
    from steadytune.model.lora import attach_adapter

    keys = {"model_name_or_path": str(folders[kind]), "template": TINY_VLM_TEMPLATES[kind],
            "freeze_multi_modal_projector": False}
    cfg = load_config(None, keys)
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    model = attach_adapter(model, cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                param.add_(torch.randn_like(param) * 0.05)
    run_dir = tmp_path / "run"
    model.save_pretrained(run_dir)
    save_resolved_config(cfg, run_dir / "run_config.yaml")
    assert main(["export", str(run_dir), f"export_dir={tmp_path / 'merged'}", "infer_dtype=float32"]) == 0

    def logits(source):
        run_ = open_run(str(source))
        loaded, tok = load_run(run_, quiet=True)
        prompts = VisionPrompts.for_model(run_.cfg, loaded, tok, run_template(run_.cfg, tok),
                                          folder=run_.folder if run_.kind == "model" else None)
        prompt = question(prompts, COLOURS[0])
        ids = torch.tensor([prompt.ids])
        with torch.no_grad():
            hidden = run_body(loaded, {"input_ids": ids, **type_id_inputs(loaded, ids), **prompt.pixels})
            return loaded.get_output_embeddings()(hidden.last_hidden_state)

    unmerged, merged = logits(run_dir), logits(tmp_path / "merged")
    torch.testing.assert_close(merged, unmerged, rtol=1e-4, atol=1e-4)
    # the base answers differently: the comparison above means something
    base_cfg = load_config(None, {"model_name_or_path": str(folders[kind]), "template": TINY_VLM_TEMPLATES[kind]})
    assert not torch.allclose(logits_of_folder(base_cfg), merged, atol=1e-3)


def logits_of_folder(cfg):
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    model.eval()
    prompts = VisionPrompts.for_model(cfg, model, tokenizer, run_template(cfg, tokenizer))
    prompt = question(prompts, COLOURS[0])
    ids = torch.tensor([prompt.ids])
    with torch.no_grad():
        hidden = run_body(model, {"input_ids": ids, **type_id_inputs(model, ids), **prompt.pixels})
        return model.get_output_embeddings()(hidden.last_hidden_state)


def test_gguf_export_of_a_vlm_is_refused_before_anything_is_written(folders):
    from steadytune.errors import UserError
    from steadytune.infer.gguf_file import check_gguf

    model, _, _ = loaded(folders["gemma3_vl"], "gemma3_vl")
    with pytest.raises(UserError, match="mmproj"):
        check_gguf(model)
