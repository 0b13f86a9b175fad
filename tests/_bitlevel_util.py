"""Helpers shared by the bit-level kernel tests."""
import torch


def poison_allocator(nbytes: int) -> None:
    """Leave a NaN-filled (0xFF bytes) block in PyTorch's CUDA caching allocator,
    so the next op's ``torch.empty`` output of that size starts as NaN and any
    element a kernel forgets to write fails the comparison."""
    t = torch.full((nbytes,), 0xFF, dtype=torch.uint8, device="cuda")
    del t


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype == torch.float16:
        return torch.equal(a.view(torch.int16), b.view(torch.int16))
    return torch.equal(a, b)
