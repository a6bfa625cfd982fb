"""Ray's name for the GPU of a vast offer (issue 24): the `ray.io/accelerator-type` label and the
`accelerator_type:<name>` resource a worker with that GPU carries.

Ray names a node's GPU itself, from the name NVML reports (`NvidiaGPUAcceleratorManager.
_gpu_name_to_accelerator_type`): "NVIDIA A100-SXM4-80GB" is `A100`, "NVIDIA H100 80GB HBM3" is
`H100`, but a consumer card's mixed-case product line falls back to the hyphenated name:
"NVIDIA GeForce RTX 4090" is `GeForce-RTX-4090`. vast names the same cards by its own short names
("A100 SXM4", "RTX 4090"), which are not NVML's (fed as they are, "A100 SXM4" would give `SXM4`).
So a vast name is first written as NVML writes it (`nvml_name`), then named by Ray's rule, copied
here exactly (the model stays free of Ray; tests/model/test_accelerators.py holds it to Ray's own
function). Ray's simulated-GPU workers here have no NVML, so the agent advertises what a real
card's Ray would have found.
"""

from __future__ import annotations

import re

# Ray's label key (ray._raylet.RAY_NODE_ACCELERATOR_TYPE_KEY) and resource prefix
# (ray_constants.RESOURCE_CONSTRAINT_PREFIX, what `@ray.remote(accelerator_type=...)` asks for).
ACCELERATOR_LABEL = "ray.io/accelerator-type"
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
# Ray 2.60's NVIDIA_GPU_NAME_PATTERN.
_RAY_PATTERN = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")
# vast's names of GeForce cards: a numbered RTX or GTX ("RTX 4090", "GTX 1080 Ti").
_GEFORCE = re.compile(r"^(RTX|GTX)\s+\d")


def nvml_name(vast_name: str) -> str:
    """The name NVML reports for a card vast calls `vast_name`: GeForce cards carry their
    product line, Tesla and Quadro cards their own prefix, the rest "NVIDIA"."""
    name = " ".join(vast_name.split())
    if name.startswith(("Tesla ", "Quadro ")):
        return name
    if _GEFORCE.match(name):
        return f"NVIDIA GeForce {name}"
    return f"NVIDIA {name}"


def ray_name(nvml: str) -> str | None:
    """Ray's accelerator type for an NVML name, by Ray's own rule."""
    match = _RAY_PATTERN.match(nvml)
    result = match.group(1).replace(" ", "-") if match else None
    if result and len(result) > 1:
        return result
    cleaned = re.sub(r"^NVIDIA\s+", "", nvml).strip()
    return cleaned.replace(" ", "-") if cleaned else None


def accelerator_type(vast_name: str) -> str | None:
    """Ray's accelerator type of a card vast calls `vast_name`."""
    return ray_name(nvml_name(vast_name))
