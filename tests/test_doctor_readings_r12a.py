"""doctor, round 12 (issue 63): readings for batch 11's missed training cases of the abi-mismatch and attention
families. Each paste is written for its reading (another GPU, tool, version or wording than the mined case that asked
for it); the negatives keep each reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # DeepSpeed's op builder refusing a toolkit of another CUDA major (a 12.x toolkit, a CUDA 11 torch): torch's index
    # nearest below the toolkit
    ("ds_report\n>- DeepSpeed Op Builder: Installed CUDA version 12.4 does not match the version torch was compiled "
     "with 11.8, unable to compile cuda/cpp extensions without a matching cuda version.", "abi-mismatch",
     ["--index-url https://download.pytorch.org/whl/cu126", "CUDA_HOME"]),
    # the same check in a user's words, a CUDA 11.8 toolkit: the CUDA 11 torch
    ("deepspeed fails on my box: Installed CUDA version 11.8 does not match torch version (torch 2.3.1+cu121)",
     "abi-mismatch", ["whl/cu118"]),
    # one major apart in minor only, an older DeepSpeed: a DeepSpeed that accepts it
    ("DeepSpeed 0.8.0\nInstalled CUDA version 12.6 does not match the version torch was compiled with 12.1, unable to "
     "compile cuda/cpp extensions without a matching cuda version.", "abi-mismatch", ["pip install -U deepspeed"]),
    # torchvision's release under a nightly torch (its .dev version, another symbol): the nightly index or a source build
    ("pip list | grep torch\ntorch        2.6.0.dev20241112+cu124\ntorchvision  0.20.1\nimport torchvision\n"
     "OSError: /opt/venv/lib/python3.11/site-packages/torchvision/_C.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev",
     "abi-mismatch", ["nightly", "source", "pytorch/vision"]),
    # torchaudio beside a nightly named in words
    ("using the torch nightly build with torchaudio 2.5.1\nOSError: /usr/local/lib/python3.10/dist-packages/torchaudio/"
     "lib/libtorchaudio.so: undefined symbol: _ZNK5torch8autograd4Node4nameEv", "abi-mismatch",
     ["nightly", "source", "pytorch/audio"]),
    # an exllamav2 release whose wheels are for torch 2.2, under torch 2.1 (another release, another wording)
    ("exllamav2 0.0.15 + torch 2.1.2+cu121 on Windows 11, Python 3.10\nImportError: DLL load failed while importing "
     "exllamav2_ext: The specified procedure could not be found.", "abi-mismatch", ["torch==2.2.*", "0.0.12"]),
    # exllamav2 0.0.20 on Linux under torch 2.2: the torch its wheels are built for
    ("pip install exllamav2==0.0.20\ntorch 2.2.2\nImportError: /home/u/.local/lib/python3.11/site-packages/"
     "exllamav2_ext.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "abi-mismatch",
     ["torch==2.3.0", "0.0.19"]),
    # flash-attn 2.8.0.post2's torch 2.6 wheel with the C++11 symbol under torch 2.6.0+cu124: the release before
    ("flash_attn==2.8.0.post2 installed with pip, torch 2.6.0+cu124, python 3.10\n  File \"/opt/conda/lib/python3.10/"
     "site-packages/flash_attn/flash_attn_interface.py\", line 15, in <module>\n    import flash_attn_2_cuda as "
     "flash_attn_gpu\nImportError: /opt/conda/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-"
     "gnu.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
     "abi-mismatch", ["2.7.4.post1", "--no-build-isolation"]),
    # LLaVA's __init__ hiding its model import (another class, another checkout): the hidden error and its remedy
    ("python -m llava.serve.cli --model-path liuhaotian/llava-v1.6-mistral-7b\nTraceback (most recent call last):\n"
     "  File \"/data/LLaVA/llava/__init__.py\", line 1, in <module>\n    from .model import LlavaLlamaForCausalLM\n"
     "ImportError: cannot import name 'LlavaMistralForCausalLM' from 'llava.model' (/data/LLaVA/llava/model/__init__.py)",
     "abi-mismatch", ["flash-attn --no-build-isolation --no-cache-dir", "llava.model.language_model"]),
    # an installed package's subpackage importing as an empty folder (another package, Linux): the clean reinstall
    ("transformers==4.44.2\n  File \"/home/me/venv/lib/python3.11/site-packages/transformers/__init__.py\", line 26, in "
     "<module>\n    from .pipelines import pipeline\nImportError: cannot import name 'pipeline' from "
     "'transformers.pipelines' (unknown location)", "abi-mismatch",
     ["pip uninstall -y transformers", "site-packages/transformers", "pip install transformers"]),
    # flash-attn's GPU check on a Pascal card, a fine-tune of LLaVA (early 2.x wording): its train.py
    ("finetuning llava with scripts/finetune.sh (llava/train/train_mem.py) on 4x Tesla P100\nRuntimeError: Expected "
     "is_sm90 || is_sm8x to be true, but got false.", "attention", ["train.py", "attn_implementation"]),
    # flash-attn 1.x's check on a V100, a vicuna fine-tune: FastChat's xFormers trainer
    ("fine-tuning vicuna-7b on 8 V100 32GB\n  File \"flash_attn/flash_attn_interface.py\", line 21, in "
     "_flash_attn_forward\nRuntimeError: Expected is_sm90 || is_sm8x || is_sm75 to be true, but got false.",
     "attention", ["train_xformers.py", "train.py"]),
    # vLLM refusing flash attention on a Turing card (another model, another card): vLLM's own backend switch
    ("vllm serve Qwen/Qwen2.5-VL-7B-Instruct on a Tesla T4\nRuntimeError: FlashAttention only supports Ampere GPUs or "
     "newer.", "attention", ["VLLM_ATTENTION_BACKEND=XFORMERS"]),
    # flash-attn built for another torch on a Volta card: remove it (a rebuild would only reach the GPU check)
    ("Tesla V100-SXM2-32GB, torch 2.3.0\nfrom transformers import AutoModel\nImportError: /usr/local/lib/python3.11/"
     "dist-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
     "_ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEE", "attention", ["pip uninstall -y flash-attn", "sdpa"]),
    # the same on Windows with a Pascal GeForce (a DLL, another wording)
    ("GTX 1080 Ti, ComfyUI portable\nImportError: DLL load failed while importing flash_attn_2_cuda: The specified "
     "procedure could not be found.", "attention", ["pip uninstall -y flash-attn"]),
]

NEGATIVES = [
    # DeepSpeed accepting a minor mismatch: nothing to reinstall
    ("Installed CUDA version 12.4 does not match the version torch was compiled with 12.1 but since the APIs are "
     "compatible, accepting this combination", "download.pytorch.org/whl/cu126"),
    # torchvision under a torch release (no nightly): not the nightly index
    ("torch 2.5.1+cu121, torchvision 0.19.0\nOSError: /venv/lib/python3.10/site-packages/torchvision/_C.so: undefined "
     "symbol: _ZN3c1017RegisterOperatorsD1Ev", "nightly"),
    # exllamav2 0.0.19 under torch 2.2, the torch its wheels were built for: not another torch
    ("exllamav2 0.0.19, torch 2.2.1+cu121\nImportError: DLL load failed while importing exllamav2_ext: The specified "
     "procedure could not be found.", "torch==2.3.0"),
    # flash-attn's C++11 symbol under torch 2.5 (no mislabelled release named): not 2.7.4.post1
    ("flash_attn 2.7.0.post2, torch 2.5.1+cu124\nImportError: /opt/conda/lib/python3.10/site-packages/flash_attn_2_cuda."
     "cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_string"
     "IcSt11char_traitsIcESaIcEEE", "2.7.4.post1"),
    # torch 2.6.0+cu126 has the C++11 ABI itself: not the mislabelled wheel
    ("flash_attn==2.8.2, torch 2.6.0+cu126\nImportError: /opt/conda/lib/python3.10/site-packages/flash_attn_2_cuda."
     "cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs", "2.7.4.post1"),
    # a name missing from another package: not LLaVA's hidden import
    ("ImportError: cannot import name 'LlamaFlashAttention2' from 'transformers.models.llama.modeling_llama' "
     "(/venv/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py)", "llava.model.language_model"),
    # a project's own folder without __init__.py, no installed package shown: not the clean reinstall
    ("python main.py\nImportError: cannot import name 'helper' from 'mytool.utils' (unknown location)",
     "repeat until pip says"),
    # flash-attn's GPU check in an inference script (no fine-tuning): no trainer script to switch
    ("python chat.py on a V100\nRuntimeError: Expected is_sm90 || is_sm8x || is_sm75 to be true, but got false.",
     "train.py"),
    # flash-attn refused in transformers (no vLLM): not vLLM's variable
    ("model = AutoModelForCausalLM.from_pretrained(path, attn_implementation='flash_attention_2') on a T4\n"
     "RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "VLLM_ATTENTION_BACKEND"),
    # flash-attn built for another torch on an Ampere card: rebuild it, do not remove it
    ("RTX 3090, torch 2.3.0\nImportError: /usr/local/lib/python3.11/dist-packages/flash_attn_2_cuda.cpython-311-x86_64-"
     "linux-gnu.so: undefined symbol: _ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEE",
     "the model's code then uses its own attention"),
    # flash-attn 1.x's extension on a T4 (Turing runs 1.x): its rebuild, not its removal
    ("Tesla T4, flash-attn 1.0.9\nImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_cuda.cpython-310-x86_64"
     "-linux-gnu.so: undefined symbol: _ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEE",
     "the model's code then uses its own attention"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
