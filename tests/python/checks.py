"""What the Python tests share: record a failed check, and finish with the
count and the exit status (0, or 1 when anything failed); the device
argument, attention kernels for runs compared bit for bit, and the
optional packages a test needs (skip, 77, without); a
free port for torch.distributed, and a rank's start."""
import datetime
import importlib
import os
import socket
import sys

failures = []


def check(cond, what):
    """Record `what` as a failure (and print it) unless `cond` holds."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def finish():
    print(f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


def device_arg() -> str:
    """argv[1], "cpu" or "cuda"; skip (77) when it is cuda and torch has none."""
    import torch
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        sys.exit(77)
    return device


def require(module: str):
    """The module, or skip (77) when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        print(f"SKIP: {module} is not installed")
        sys.exit(77)


def free_port() -> int:
    """A TCP port free on the loopback now (for torch.distributed's store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_rank(mode: str, timeout_s: float):
    """A rank of a test that started its own ranks (RANK and the store in
    the environment) joins the default process group: NCCL and a GPU a
    rank for "cuda", else gloo on the CPU.  Returns (rank, device)."""
    import torch
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    dev = torch.device("cpu")
    if mode == "cuda":
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if mode == "cuda" else "gloo",
                            timeout=datetime.timedelta(seconds=timeout_s))
    return rank, dev


def exact_attention(device: str) -> None:
    """On cuda, attention's math kernels, for runs compared bit for bit: the
    fused backwards accumulate with atomics, in no fixed order."""
    if device == "cuda":
        import torch
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
