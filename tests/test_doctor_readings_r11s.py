"""doctor, round 11 (issue 63): readings for the spent held-out cases of round 10. Each paste is written for its
reading (another GPU, tool, version or wording than the mined case that asked for it); the negatives keep each
reading out of pastes it does not fit."""

from __future__ import annotations

from test_doctor_paraphrases import reading_tests

# (paste, family, phrases the fix must say)
READINGS = [
    # the early open module refusing a GeForce card (another card, the refusal unwrapped on one line): the opt-in
    ("journalctl -k | grep NVRM\nNVRM: Open nvidia.ko is only ready for use on Data Center GPUs. To force use of Open "
     "nvidia.ko on other GPUs, see the 'OpenRmEnableUnsupportedGpus' kernel module parameter\nRTX 3060, "
     "nvidia-open 525.60.11", "driver", ["NVreg_OpenRmEnableUnsupportedGpus=1", "/etc/modprobe.d"]),
    # GSP asked off with the option, said by a user of the open package on an Ada card: the proprietary modules
    ("Installed nvidia-driver-550-open on Ubuntu 22.04 with an RTX 4090. Added options nvidia "
     "NVreg_EnableGpuFirmware=0 in /etc/modprobe.d/gsp.conf and rebooted, but nvidia-smi -q still shows the GSP "
     "Firmware Version", "driver", ["GSP", "sudo rm /etc/modprobe.d/gsp.conf", "proprietary"]),
    # the same asked for a Blackwell data-center card: it stays on
    ("how can I turn off GSP on our B200 nodes? the open kernel modules ignore NVreg_EnableGpuFirmware=0", "driver",
     ["GSP", "B200"]),
]


# (paste, a phrase the top reading's fix must NOT say)
NEGATIVES = [
    # the parameter already set: not the opt-in again
    ("options nvidia NVreg_OpenRmEnableUnsupportedGpus=1\nNVRM: Open nvidia.ko is only ready for use on Data Center "
     "GPUs.\nNVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)", "sudo tee /etc/modprobe.d/nvidia-open"),
    # GSP disabled on the proprietary driver of a Turing card: that works, nothing about the open modules
    ("RTX 2080 Ti with the proprietary 535 driver: I set NVreg_EnableGpuFirmware=0 to fix stutter in games",
     "GSP cannot be disabled"),
]


test_reads, test_pastings, test_negatives = reading_tests(READINGS, NEGATIVES)
