"""`steadytune serve` with a vision-language model: OpenAI's image_url parts (data URLs; local paths only when allowed;
an http(s) URL refused with 400 naming the part, never fetched), answers equal to transformers' generate over the
same prompt and pixels, text requests through the batching engine as before, limits on images."""

from __future__ import annotations

import base64
import io

import pytest
import torch

openai = pytest.importorskip("openai", reason="serve tests need the openai client (pip install -e '.[dev]')")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="serve needs uvicorn (pip install -e '.[serve]')")
pytest.importorskip("fastapi", reason="serve needs FastAPI (pip install -e '.[serve]')")

from test_serve import serving  # noqa: E402
from vlm_batches import square  # noqa: E402

from steadytune.infer.generate import run_template  # noqa: E402
from steadytune.infer.loading import open_run  # noqa: E402
from steadytune.infer.media import VisionPrompts  # noqa: E402
from steadytune.model.tiny import save_tiny_model  # noqa: E402
from steadytune.model.tiny_vlm import save_tiny_vlm  # noqa: E402
from steadytune.serve.app import build_app  # noqa: E402
from steadytune.serve.command import build_engine  # noqa: E402
from steadytune.serve.limits import ImageLimits, Limits, ServeSettings  # noqa: E402
from steadytune.serve.loading import load_served  # noqa: E402

LIMITS = Limits(max_body_bytes=64 << 10, max_prompt_tokens=400, max_tokens=32)


def data_url(colour, size=32) -> str:
    buffer = io.BytesIO()
    square(colour, size).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def image_message(url: str, text: str = "What colour is this?") -> dict:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_serve")
    return {"vlm": save_tiny_vlm(root / "vlm", "qwen2_5_vl"), "text": save_tiny_model(root / "text"), "root": root}


def start(folder, template, images=ImageLimits()):
    loaded = load_served(str(folder), [], [f"template={template}"], "m")
    engine = build_engine(loaded, max_batch=4, max_queue=16)
    return serving(build_app(engine, loaded, ServeSettings(limits=LIMITS, images=images)))


@pytest.fixture(scope="module")
def url(folders):
    with start(folders["vlm"], "qwen2_vl", ImageLimits(max_images=2, max_image_pixels=64 * 64)) as base:
        yield base


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)


def test_an_image_answer_equals_transformers_generate(client, folders):
    red = data_url((255, 0, 0))
    answer = client.chat.completions.create(model="m", messages=[image_message(red)], max_tokens=6, temperature=0)
    # the reference: the same folder loaded apart, the prompt encoded as training encodes it, transformers' generate
    run_ = open_run(str(folders["vlm"]), ["template=qwen2_vl"])
    from steadytune.infer.loading import load_run
    from steadytune.model.vision import type_id_inputs

    model, tokenizer = load_run(run_, quiet=True)
    prompts = VisionPrompts.for_model(run_.cfg, model, tokenizer, run_template(run_.cfg, tokenizer))
    prompt = prompts.encode([{"role": "user", "content": "<image>What colour is this?"}], None,
                            [base64.b64decode(red.split(",", 1)[1])], "ref")
    ids = torch.tensor([prompt.ids])
    stops = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **prompt.pixels,
                         **type_id_inputs(model, ids), max_new_tokens=6, do_sample=False, eos_token_id=stops,
                         pad_token_id=tokenizer.pad_token_id)
    new = out[0, len(prompt.ids):].tolist()
    expected = tokenizer.decode([t for t in new if t not in stops], skip_special_tokens=True)
    assert answer.choices[0].message.content == expected
    assert answer.usage.prompt_tokens == len(prompt.ids) and answer.usage.completion_tokens == len(new)
    # and the image matters: a blue square is another prompt (other pixels under the same tokens)
    stream = client.chat.completions.create(model="m", messages=[image_message(red)], max_tokens=6, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage.completion_tokens == len(new)


def test_text_requests_to_the_vlm_still_go_through_the_engine(client):
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=4,
                                            temperature=0)
    assert answer.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("url_, message", [
    ("https://example.com/cat.png", "a https URL: this server never fetches images"),
    ("http://127.0.0.1:1/x.png", "a http URL: this server never fetches images"),
    ("ftp://example.com/x.png", "a ftp URL"),
    ("/etc/hostname", "a local file path: this server takes images as data URLs"),
    ("data:image/png;base64,@@@", "base64 does not decode"),
    ("data:text/plain,hello", "must be base64-encoded"),
    ("data:image/png;base64," + base64.b64encode(b"not a png").decode(), "not an image Pillow can read"),
])
def test_images_that_are_not_data_urls_are_refused_naming_the_part(url, url_, message):
    response = httpx.post(url + "/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes?"},
                                   image_message(url_)]}, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages[2].content[0].image_url" and message in error["message"], error


def test_image_limits(url):
    big = data_url((255, 0, 0), size=100)   # 100 x 100 > the 64 x 64 this server takes
    for messages, param, message in [
        ([image_message(big)], "messages[0].content[0].image_url", "100x100 pixels"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url((1, 2, 3))}}] * 3}],
         "messages[0].content[2].image_url", "more than 2 images"),
        ([{"role": "user", "content": [{"type": "text", "text": "<image> hi"},
                                       {"type": "image_url", "image_url": {"url": data_url((1, 2, 3))}}]}],
         "messages[0].content", "stands for an image"),
    ]:
        response = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
        assert message in response.json()["error"]["message"]
    response = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": [image_message(big)], "n": 2})
    assert response.status_code == 400


def test_local_images_only_from_the_allowed_folders_and_one_message_for_every_refusal(folders):
    """--allow-local-images opened any file the server could read (/etc/shadow as root), and its two messages told a
    client which files exist (issue 67). Now only an image file inside the folders it names is read (links resolved),
    and every refusal of a path is the same answer, whether the file is outside, missing, a link out, a FIFO, too big,
    not an image or a bomb."""
    import os

    from multimodal_setup import bomb_png

    allowed, outside = folders["root"] / "allowed", folders["root"] / "outside"
    allowed.mkdir()
    outside.mkdir()
    square((255, 0, 0)).save(allowed / "red.png")
    square((0, 0, 255)).save(outside / "secret.png")
    (allowed / "out.png").symlink_to(outside / "secret.png")
    (allowed / "notes.txt").write_text("not an image")
    (allowed / "big.png").write_bytes(b"\0" * (1 << 20))
    bomb_png(allowed / "bomb.png", side=14000)
    os.mkfifo(allowed / "pipe.png")
    refused = [f"file://{outside / 'secret.png'}", str(allowed / "out.png"), str(allowed / "missing.png"),
               str(allowed / "notes.txt"), str(allowed / "big.png"), str(allowed / "bomb.png"), str(allowed / "pipe.png"),
               f"{allowed}/../outside/secret.png", "/etc/passwd", "/etc/shadow", "/nonexistent/x.png", str(allowed),
               "file://localhost/etc/passwd", f"file://{allowed}/%2e%2e/outside/secret.png"]
    limits = ImageLimits(max_image_bytes=1 << 19, local_image_dirs=(os.path.realpath(allowed),))
    with start(folders["vlm"], "qwen2_vl", limits) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=60)
        local = client.chat.completions.create(model="m", messages=[image_message(f"file://{allowed / 'red.png'}")],
                                               max_tokens=4, temperature=0)
        inline = client.chat.completions.create(model="m", messages=[image_message(data_url((255, 0, 0)))],
                                                max_tokens=4, temperature=0)
        assert local.choices[0].message.content == inline.choices[0].message.content
        answers = {path: httpx.post(base + "/v1/chat/completions", timeout=30,
                                    json={"model": "m", "messages": [image_message(path)]}) for path in refused}
    assert all(r.status_code == 400 for r in answers.values()), {p: r.text for p, r in answers.items()}
    bodies = {r.text for r in answers.values()}
    assert len(bodies) == 1, bodies   # one answer for all: nothing tells which files exist
    assert "inside the folders its operator allowed with --allow-local-images" in bodies.pop()


def test_allow_local_images_takes_folders_and_refuses_a_public_host_without_a_key(folders):
    from steadytune.cli import build_parser
    from steadytune.errors import UserError
    from steadytune.serve.command import settings_from_args

    def settings(*argv):
        return settings_from_args(build_parser(["serve"]).parse_args(["serve", "run", *argv]))

    root = folders["root"]
    assert settings().images.local_image_dirs == ()
    assert settings("--allow-local-images", str(root), str(root / ".")).images.local_image_dirs == (
        str(root.resolve()),)
    with pytest.raises(UserError, match="--allow-local-images with --host 0.0.0.0: any machine"):
        settings("--host", "0.0.0.0", "--allow-local-images", str(root))
    assert settings("--host", "0.0.0.0", "--api-key", "k" * 16, "--allow-local-images", str(root)).images.allow_local_images
    with pytest.raises(UserError, match="not a folder"):
        settings("--allow-local-images", str(root / "missing"))
    with pytest.raises(SystemExit):   # a bare flag: argparse's usage error (it takes the folders now)
        settings("--allow-local-images")


def test_a_decompression_bomb_in_a_data_url_is_refused_for_its_pixels(url, tmp_path):
    """A 24 KB PNG of 14000 x 14000 pixels: Pillow's own bound stops it in Image.open; the answer says why (it read
    "not an image Pillow can read")."""
    from multimodal_setup import bomb_png

    data = bomb_png(tmp_path / "bomb.png", side=14000).read_bytes()
    response = httpx.post(url + "/v1/chat/completions", timeout=30, json={"model": "m", "messages": [
        image_message("data:image/png;base64," + base64.b64encode(data).decode())]})
    assert response.status_code == 400 and "more pixels than Pillow decodes" in response.json()["error"]["message"]


def test_a_text_model_refuses_images(folders):
    with start(folders["text"], "qwen") as base:
        response = httpx.post(base + "/v1/chat/completions", json={
            "model": "m", "messages": [image_message(data_url((255, 0, 0)))]}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["code"] == "images_not_supported"
