"""doctor, round 12 (issue 63), helper g: a crash said in the user's own words on Windows ("it reports 0xc0000005",
"exit code 3221225477", "an access violation") is a crash however much unrelated log stands around it. The mined case
(likelovewant/ollama-for-amd#18, a 780M) was read only while the paste was short: pasted among pip, server and progress
lines it lost its reading. Each paste here is a crash in words on another AMD iGPU, wrapped in other noise (a conda
prompt, pip's lines, a download bar, uvicorn's start-up, a batch job's end); the negatives keep the reading out of
crashes on GPUs whose code the builds carry, and out of the same noise around a 680M that runs."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# unrelated lines around the report, none of them about the GPU: more of them than a short paste holds
_BEFORE = ("(base) PS C:\\Users\\kim> conda activate llm\n"
           "Requirement already satisfied: tqdm in c:\\users\\kim\\miniconda3\\lib\\site-packages (4.66.4)\n"
           "Requirement already satisfied: requests in c:\\users\\kim\\miniconda3\\lib\\site-packages (2.32.3)\n"
           "Fetching 3 files: 100%|##########| 3/3 [00:01<00:00,  2.10it/s]\n"
           "Downloading (…)model.safetensors: 100%|##########| 4.94G/4.94G [02:11<00:00, 37.6MB/s]\n"
           "INFO:     Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C to quit)\n"
           "INFO:     Waiting for application startup.\n"
           "INFO:     Application startup complete.\n"
           "time=2024-10-02T09:14:55 level=INFO msg=\"starting llm server\"\n"
           "Collecting sentencepiece\n"
           "  Downloading sentencepiece-0.2.0-cp311-cp311-win_amd64.whl (991 kB)\n"
           "Installing collected packages: sentencepiece\n"
           "Successfully installed sentencepiece-0.2.0\n")
_AFTER = "\nKeyboardInterrupt\nTerminate batch job (Y/N)? Y\n"


def _in_noise(report: str) -> str:
    return _BEFORE + report + _AFTER


# (paste, family, phrases the fix must say)
READINGS = [
    # Ollama's Windows zip on a 680M (gfx1035, not the mined 780M), the crash code with "error" beside it: read alone
    # before this round, lost among the noise
    (_in_noise("Radeon 680M on a Ryzen 9 6900HS laptop, Windows 11\nOllama version 0.3.6 from the windows zip\n"
               "ollama run qwen2.5:7b: error 0xc0000005 right after the model loads\n"),
     "arch-missing", ["rocblas", "gfx1035"]),
    # the same report alone, and with the code in words only ("gives"), no failure word beside it
    ("Radeon 680M on a Ryzen 9 6900HS laptop, Windows 11\nOllama version 0.3.6 from the windows zip\n"
     "ollama run qwen2.5:7b gives 0xc0000005 right after the model loads\n", "arch-missing", ["rocblas", "gfx1035"]),
    # koboldcpp's ROCm fork on a 760M (gfx1103 under another name), the status as Windows' unsigned exit code
    (_in_noise("AMD Ryzen 5 8645HS w/ Radeon 760M Graphics\nOS: Windows 10\nkoboldcpp-rocm for windows\n"
               "koboldcpp_rocm.exe closes while loading: exit code 3221225477\n"),
     "arch-missing", ["rocblas", "gfx1103"]),
]

NEGATIVES = [
    # the same crash in words on a card the HIP SDK's rocBLAS carries (gfx1100): no missing code to name
    (_in_noise("Radeon RX 7900 XTX, Windows 11\nOllama version 0.3.6 from the windows zip\n"
               "ollama run qwen2.5:7b: error 0xc0000005 right after the model loads\n"), "built for gfx1100"),
    # on an NVIDIA laptop GPU: not an AMD build's missing arch
    (_in_noise("RTX 4060 laptop GPU, Windows 11\nOllama version 0.3.6\n"
               "ollama run qwen2.5:7b: error 0xc0000005 right after the model loads\n"), "rocblas"),
    # the 680M among the same noise with no crash and no complaint: the noise itself reads as nothing
    (_in_noise("Radeon 680M on a Ryzen 9 6900HS laptop, Windows 11\nOllama version 0.3.6 from the windows zip\n"
               "ollama run qwen2.5:7b answers at 14 tokens/s with all layers on the GPU\n"), "rocblas"),
]

test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
