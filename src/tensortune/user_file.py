"""What a user names as ``path/to/file.py:name`` on the command line: a function
(``tensortune tune my_ops.py:matmul_relu``) or a model (``tensortune tune-model
net.py:build``) defined in their own file.

The file is run as a module of its own. Every way this can fail says which file and
name, and what would be valid: the file missing, the file failing to run (its own
error, with the line), or the name absent (the names it does define that could be
meant: its own functions and classes and the objects it made, not the modules and
functions it imported).

Example:
    >>> obj = load_attr("my_ops.py:matmul_relu")
"""

from __future__ import annotations

import importlib.util
import inspect
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import TensorTuneError


def load_attr(spec: str) -> Any:
    """The object ``name`` defined by ``path/to/file.py:name``; a ``TensorTuneError``
    saying what is wrong otherwise."""
    path, sep, attr = spec.rpartition(":")
    if not sep or not path or not attr:
        raise TensorTuneError(f"{spec}: expected path/to/file.py:name")
    if not Path(path).is_file():
        raise TensorTuneError(f"{spec}: no such file {path!r}")
    module = _run(path)
    if not hasattr(module, attr):
        names = defined_names(module)
        raise TensorTuneError(f"{path} has no {attr!r}; it defines: "
                              f"{', '.join(names) if names else 'nothing that could be meant'}")
    return getattr(module, attr)


def defined_names(module: ModuleType) -> list[str]:
    """The public names of ``module`` a user could mean: not modules, and not functions
    or classes it imported from elsewhere."""
    out = []
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and \
                getattr(obj, "__module__", None) != module.__name__:
            continue
        out.append(name)
    return out


def _run(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise TensorTuneError(f"{path}: not a Python file that can be loaded")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        # The user's own frames (their file's line), not importlib's.
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if Path(f.filename).resolve() == Path(path).resolve()]
        where = f", line {frames[-1].lineno}" if frames else (
            f", line {e.lineno}" if isinstance(e, SyntaxError) and e.lineno else "")
        raise TensorTuneError(f"{path}{where} failed to run: {type(e).__name__}: {e}") from e
    return module
