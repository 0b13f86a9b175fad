import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def nan_empty():
    """torch.empty that is NaN-filled, so memory a kernel forgets to write fails the test."""
    def make(*shape, dtype=torch.float16, device="cuda"):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return make
