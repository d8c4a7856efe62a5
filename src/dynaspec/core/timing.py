"""Wall-clock timing that is true on any device.

A forward on a GPU returns before the device has finished; reading `perf_counter` right after
it times only the launch. `device_clock(device)` waits for the device first, so the costs the
adaptive policy learns and the stats report are what the work really took. On a CPU the wait
is a no-op.
"""

from __future__ import annotations

from time import perf_counter

import torch


def synchronize(device: torch.device | str | None) -> None:
    """Waits until every kernel queued on `device` has finished (no-op on the CPU)."""
    if device is None:
        return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu" and hasattr(torch, "xpu"):
        torch.xpu.synchronize(device)
    elif device.type == "mps" and hasattr(torch, "mps"):
        torch.mps.synchronize()


def device_clock(device: torch.device | str | None) -> float:
    """`perf_counter()` after the device has finished its queued work."""
    synchronize(device)
    return perf_counter()
