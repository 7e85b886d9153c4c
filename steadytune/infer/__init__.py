"""Using what was trained: load it for inference, generate, chat, predict, export, archive.

- `loading`  one loader for every inference path (eval, demo, chat, predict, export): a CONFIG, RUN_DIR or ARCHIVE
             becomes (config, trained folder, kind), then a model on the device and dtype the hardware policy picks
- `generate` generation settings from the config, the run's chat template as text and as Jinja, streaming
- `archive`  the adapter archive: one .tar.gz with a SHA-256 manifest, checked before anything is loaded
- `card`     the model card and the portable name of the base model
- `export`   merge into the base and save a Hugging Face folder; `gguf_file` writes the GGUF file (`gguf_experts`:
             the routed experts, routers and shared experts of a mixture of experts, as llama.cpp reads them)
- `gptq_export`  `export_quantization_bit`: the merged folder quantised by GPTQModel, loaded back and compared
- `media`    prompts with images for a vision-language model, encoded as training encoded its rows
- `chat`, `predict`  the interactive and the batch front ends

The command modules (`steadytune export | chat | predict`) live here too, as `export`, `chat` and `predict`:
each has `add_arguments(parser)` and `run(args)`, and none imports another command.
"""
