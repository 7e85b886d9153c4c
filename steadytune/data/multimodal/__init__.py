"""Vision-language data: LLaMA-Factory's multimodal rows (`images` / `videos` columns, `<image>` / `<video>`
placeholders, v1's image_url content parts) turned into the ids, labels and pixels a VLM trains on, as LLaMA-Factory
0.9.5 makes them, except that an image's tokens are never cut. One job per module:

- media.py       where a row's images and videos come from (local files under media_dir, data URLs, base64, bytes;
                 never a URL) and opening them, errors naming the file and the row;
- preprocess.py  LLaMA-Factory's image resizing (image_max_pixels / image_min_pixels) and video frame sampling
                 (video_fps / video_maxlen, decoded with PyAV);
- rows.py        the media of a dataset row (columns named in dataset_info.json, v1's content parts), placeholders
                 counted against the media;
- plugins.py     per template (qwen2_vl, qwen3_vl, gemma3, llava): placeholders -> the model's tokens, the image
                 processor's call, token-type ids;
- processor.py   the model's processor, or its parts when transformers cannot assemble it (no torchvision);
- encode.py      one row -> input_ids, labels, attention_mask, media and grid sizes, never cutting a media token;
- collate.py     padded batches with the pixels made per batch (and Qwen's 3-D rope positions);
- rope.py        Qwen2-VL / Qwen3-VL 3-D rope position ids of one example (transformers' get_rope_index);
- packing.py     several examples per row with their images (LLaMA-Factory's neat_packing), positions per example.
"""
