"""Whole models: the graph IR, operators, fusion into kernels, tasks and the executor.

Example:
    >>> compiled = tt.compile_model(model.eval(), torch.randn(1, 3, 32, 32), trials=64)
    >>> print(compiled.summary())
"""

from . import activations, layout_ops, reductions  # noqa: F401  (they add their ops to OPS)
from .compile_model import CompiledModel, compile_model
from .executor import Executor
from .fuse import Group, Task, extract_tasks, fuse, group_func
from .ir import Graph, GraphError, Node
from .ops import OPS, Pattern

__all__ = ["OPS", "CompiledModel", "Executor", "Graph", "GraphError", "Group", "Node",
           "Pattern", "Task", "compile_model", "extract_tasks", "fuse", "group_func"]
