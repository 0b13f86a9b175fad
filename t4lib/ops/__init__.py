"""Kernel families. Each subpackage holds the public op (validation and
dispatch), a pure-PyTorch ``reference`` twin that defines the semantics, and
the ctypes ``binding`` to its CUDA library."""
