"""`steadytune serve`: a trained run behind the OpenAI HTTP API, so every OpenAI client and SDK can use it.

Modules: loading (SOURCE and --adapter paths -> one base model, its adapters and each served name's template;
the only place that loads weights), batch + slotcache (the running batch: each row in a slot of a preallocated KV
cache, its decode state on the device), graphs (the decode step recorded as CUDA graphs), adapters (which LoRA
adapter a forward uses), batch_dynamic + kvcache (the DynamicCache batch, for models the slot cache does not take),
transfer, sampling, text (token ids -> text with stop strings), prompt (a client's text -> ids, with control tokens
left to the template), engine (the bounded queue and the worker thread that batches requests), protocol (OpenAI
request/response bodies), app (FastAPI routes, limits, auth, errors),
metrics (Prometheus text), vllm_engine (`infer_backend: vllm`).
Nothing heavy is imported here: `steadytune serve --help` answers at once.
"""
