"""What every decoding engine shares: token-id checks, sampling and acceptance, CUDA-graph
capture with its eager fallback, and the drafter interface."""
