"""Thunder uses ``torch.device``; ``devices.Device("cuda:0")`` is how a printed trace spells one."""
import functools

import torch


@functools.lru_cache(maxsize=None)
def _device(spec: str) -> torch.device:
    return torch.device(spec)


def Device(spec) -> torch.device:  # noqa: N802 - the printed name in traces
    return spec if isinstance(spec, torch.device) else _device(spec)


def print_name(device: torch.device) -> str:
    return f'devices.Device("{device_str(device)}")'


def device_str(device: torch.device) -> str:
    if device.type == "cuda" and device.index is None:
        return "cuda:0"
    return str(device)


def normalize(device) -> torch.device:
    """torch.device with an explicit index for CUDA (``cuda`` means the current device)."""
    device = torch.device(device) if not isinstance(device, torch.device) else device
    if device.type == "cuda" and device.index is None:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return torch.device("cuda", index)
    return device
