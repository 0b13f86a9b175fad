"""t4lib: T4-honest CUDA kernels (sm_75), the engines built on them, and the
measurements behind the notebooks.

Importing t4lib never compiles and never needs a GPU: kernel libraries are
built lazily on first use (see ``t4lib._build``).
"""

__version__ = "0.1.0"
