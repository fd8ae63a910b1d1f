"""Thunder uses ``torch.device``; ``devices.Device("cuda:0")`` is how a printed trace spells one."""
import functools

import torch


# The printed name in traces (prologues call it on every call, so it is the C-level cache itself):
# a string or a torch.device gives the (equal) torch.device.
Device = functools.lru_cache(maxsize=None)(torch.device)


def print_name(device: torch.device) -> str:
    return f'devices.Device("{device_str(device)}")'


def device_str(device: torch.device) -> str:
    if device.type == "cuda" and device.index is None:
        return "cuda:0"
    return str(device)


def normalize(device) -> torch.device:
    """torch.device with an explicit index for CUDA (``cuda`` means the current device), none for the CPU (a tensor
    made on ``cpu:0`` is on ``cpu``, as eager reports it)."""
    device = torch.device(device) if not isinstance(device, torch.device) else device
    if device.type == "cpu" and device.index is not None:
        return torch.device("cpu")
    if device.type == "cuda" and device.index is None:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return torch.device("cuda", index)
    return device
