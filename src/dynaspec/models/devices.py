"""Where a model runs: a checked torch.device from the caller's `device=` argument."""

from __future__ import annotations

import torch

from dynaspec.errors import ConfigError

DeviceArg = str | torch.device | None


def resolve_device(device: DeviceArg) -> torch.device | None:
    """A torch.device that exists on this machine, or None (leave the model where it loads).

    Raises ConfigError for a name torch does not know ("gpu") or a device this machine does
    not have ("cuda" without a GPU, "cuda:3" with two).
    """
    if device is None:
        return None
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(
            f"unknown device {device!r} ({error}): pass device='cpu', 'cuda' or 'cuda:N'"
        ) from error
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {device!r} asks for a CUDA GPU but torch sees none on this machine "
                "(torch.cuda.is_available() is False): pass device='cpu'"
            )
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise ConfigError(
                f"device {device!r}: this machine has {count} CUDA GPU(s), numbered 0 to "
                f"{count - 1}: pass one of those"
            )
    return resolved
