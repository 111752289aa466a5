"""Code generation: lowering for codegen, the C emitter, SIMD, the target, the compiler."""

from .c import emit_c
from .compile import compile_source
from .lower import lower
from .target import Target

__all__ = ["Target", "compile_source", "emit_c", "lower"]
