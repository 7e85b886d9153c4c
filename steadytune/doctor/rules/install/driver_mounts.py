"""The NVIDIA driver's libraries mounted into a container at a folder the image's loader or linker does not search.

GKE (and other managed Kubernetes on Container-Optimized OS) does not use the NVIDIA Container Toolkit: its device
plugin mounts the host driver's user-space libraries into the pod at /usr/local/nvidia/lib64 (nvidia-smi at
/usr/local/nvidia/bin), and Google's GPU guide says the container must put that folder on LD_LIBRARY_PATH itself
(cloud.google.com/kubernetes-engine/docs/how-to/gpus, "CUDA libraries"). An image that does not (a python:3.x base,
an image whose newer base dropped the variable) finds no libcuda.so.1: "Found no NVIDIA driver", no platform, a
gcc link of Triton's launcher that cannot find -l:libcuda.so.1. The dynamic loader reads LD_LIBRARY_PATH and
/etc/ld.so.cache (ldconfig); the build-time linker reads LIBRARY_PATH and -L, never LD_LIBRARY_PATH.
"""

from __future__ import annotations

import re
from typing import Optional

from steadytune.doctor.rules.base import Context, Diagnosis, _first, _lines_matching, _make, _text, rule


_GKE = re.compile(r"(?i)\bGKE\b|Google Kubernetes Engine|Container-Optimized OS|/usr/local/nvidia/lib")
# Google Cloud said without GKE: the mount is GKE's only where the program runs in a container (an image, a pod)
_GCP = re.compile(r"(?i)\bGCP\b|Google Cloud")
_IN_CONTAINER = re.compile(r"(?i)\b(?:docker|containers?|images?|pods?|kubernetes|k8s)\b")
# the process in the container finds no NVIDIA driver: torch's words, the loader's, vLLM's platform detection, a link
_NO_DRIVER = re.compile(r"(?i)Found no NVIDIA driver|libcuda\.so(?:\.1)?: cannot open|cannot find -l:?(?:libcuda|cuda\b)|"
                        r"undetected platform|Failed to infer device type|No CUDA GPUs are available|"
                        r"no GPUs? (?:found|detected)|is_available\(\)\W{0,4}(?:returns? )?False")
_LINK_STEP = re.compile(r"(?i)cannot find -l:?(?:libcuda\S*|cuda\b)")
# a folder the paste shows libcuda.so.1 in (a find / ls listing): not the toolkit's forward-compat copy or its stub
_LIBCUDA_FOLDER = re.compile(r"(/[\w./+-]+?)/libcuda\.so\.1\b")
_KUBERNETES = re.compile(r"(?i)\bkubernetes\b|\bk8s\b|\bkubectl\b|\bpods?\b|\bhelm\b")


def _driver_folder(text: str) -> Optional[str]:
    found = [m.group(1) for m in _LIBCUDA_FOLDER.finditer(text)
             if not re.search(r"/compat$|/stubs$|/targets/|site-packages", m.group(1))]
    return found[0] if found else None


@rule("rocm-libs-missing")
def driver_mounted_outside_the_search_path(ctx: Context) -> Optional[Diagnosis]:
    """A container on GKE (or one whose paste shows libcuda.so.1 in a folder) that finds no NVIDIA driver: the
    driver is there, mounted where neither the loader nor the linker looks."""
    text = _text(ctx)
    failing = _lines_matching(ctx, _NO_DRIVER)
    if not failing:
        return None
    gke = _GKE.search(text) or (_GCP.search(text) and _IN_CONTAINER.search(text))
    link = _lines_matching(ctx, _LINK_STEP)
    folder = _driver_folder(text)
    if not gke and not (link and folder):
        return None
    if gke and _KUBERNETES.search(text) and not re.search(r"(?i)nvidia\.com/gpu", text) and not folder:
        return None   # a pod that never asked for the GPU: the device plugin's reading (access/device_files)
    folder = folder or "/usr/local/nvidia/lib64"
    on_path = re.search(r"LD_LIBRARY_PATH=\S*" + re.escape(folder), text)
    where = ("GKE's device plugin mounts the host's NVIDIA driver into the container at /usr/local/nvidia "
             f"(libcuda.so.1 in {folder})" if gke else f"the driver's libcuda.so.1 is in {folder}")
    if link:
        cause = (f"{where}; the build step (Triton's / the inductor's gcc link of its launcher) links "
                 "-l:libcuda.so.1, and the linker searches LIBRARY_PATH and -L, not LD_LIBRARY_PATH nor that folder")
        fix = (f"export LIBRARY_PATH={folder}:$LIBRARY_PATH in the container (the image's ENV), and register the folder "
               f"with the loader: echo {folder} > /etc/ld.so.conf.d/nvidia.conf && ldconfig")
    elif on_path:
        cause = (f"{where}, and LD_LIBRARY_PATH names it, yet the loader does not find the library there: the "
                 "loader's cache (/etc/ld.so.cache) the program relies on does not list the mounted driver")
        fix = (f"refresh the loader's cache in the container: echo {folder} > /etc/ld.so.conf.d/nvidia.conf && "
               "ldconfig (in the entrypoint, after the mount); ldconfig -p | grep libcuda must then list it")
    else:
        cause = (f"{where}, a folder the image's loader does not search: nothing in the image puts it on "
                 "LD_LIBRARY_PATH, so no libcuda.so.1 is found and the program sees no GPU")
        fix = (f"add the mounted driver to the container's environment: LD_LIBRARY_PATH={folder}:/usr/local/nvidia/lib:"
               "$LD_LIBRARY_PATH and PATH=/usr/local/nvidia/bin:$PATH (the image's ENV or the pod spec's env; or run "
               f"ldconfig on {folder}); or base the image on an nvidia/cuda image, which sets them")
    diagnosis = _make("rocm-libs-missing", "the NVIDIA driver is mounted where the container does not look",
                      cause, fix, [ctx.line_fact(failing[0])], failing + link)
    return _first(diagnosis)
