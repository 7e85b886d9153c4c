"""The pieces of the training loop that `train.py` puts together: loss, batches, numerical guard, fault
injection, checkpoints and exact resume, the run folder and its lock, metrics and trackers, CUDA graphs, signals.

Modules: loss, batches, guard, faults, checkpoint, optimizer_state, resume, run_folder, folder_config (a run folder's
own config grants no code, credentials or outside writes), lora_budget (whether the adapters fit), monitor, trackers,
graphs, stopping, speed_plan, fp8_training (LLaMA-Factory's `fp8`: torchao's float8 linear layers), startup, evaluation (when the loop evaluates, which result is the best), vision_data
and vision_speed (a vision-language run's processor, rows, collators and speed plan). None of them
sees the whole loop; train.py does.
"""
