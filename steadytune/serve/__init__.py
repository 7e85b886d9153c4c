"""`steadytune serve`: a trained run behind the OpenAI HTTP API, so every OpenAI client and SDK can use it.

Modules: loading (SOURCE and --adapter paths -> one base model, its adapters and each served name's template;
the only place that loads weights), text (token ids -> text with stop strings), prompt (a client's text -> ids, with
control tokens left to the template), engine (the bounded queue and the worker thread that batches requests; its
decode step is model/decode/: the slot-cache batch, CUDA graphs, adapters, sampling, shared with stage grpo),
protocol (OpenAI request/response bodies), app (FastAPI routes, limits, auth, errors),
metrics (Prometheus text), vllm_engine (`infer_backend: vllm`), media (a vision-language model's image_url parts,
answered with transformers' generate).
Nothing heavy is imported here: `steadytune serve --help` answers at once.
"""
