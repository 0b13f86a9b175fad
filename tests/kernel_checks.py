"""Helpers the kernel tests share (imported by name: pytest puts tests/ on sys.path)."""
import torch


def poison_allocator(nbytes: int) -> None:
    """Leave a 0xFF-filled (NaN for fp16) block in PyTorch's CUDA caching
    allocator, so the op's ``torch.empty`` output of that size starts as NaN
    and any element a kernel forgets to write fails the comparison."""
    t = torch.full((nbytes,), 0xFF, dtype=torch.uint8, device="cuda")
    del t


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype == torch.float16:
        return torch.equal(a.view(torch.int16), b.view(torch.int16))
    return torch.equal(a, b)
