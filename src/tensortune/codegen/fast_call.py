"""A kernel's call from Python in C: the argument checks, the allocation of the outputs
and the call itself in one CPython extension, built once per machine and Python.

``Kernel.__call__`` through ctypes spent 7-8 us of Python a call on its checks and
allocation alone, and 7-20 us over the kernel's C-loop time when the kernel ran
(RESULTS.md), where a layer norm of 64 x 1001 runs in 7-8 us. This
module compiles ``_tt_call`` (the C below) with the Python and NumPy headers of the
running interpreter into the kernel cache's ``call`` directory and loads it. Its
``call(spec, inputs, out)`` takes the fast path only when every argument is exactly an
ndarray of the parameter's dtype (native byte order), shape and C layout, and every
output is writeable and overlaps no other argument; for anything else it returns
``NotImplemented`` and the kernel's Python path checks again and says what is wrong.
Where the headers or the compiler are missing, ``load`` returns None (and ``REASON``
says why): kernels are then called through ctypes, as before.

Example:
    >>> mod = load()
    >>> spec = mod.spec(fn_address, "gmm", 2, ((11, (64, 64)), (11, (64, 64)), ...))
    >>> c = mod.call(spec, (a, b), None)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

from .compile import default_cache_dir

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <string.h>

#define MAX_PARAMS 64
#define MAX_DIMS 16

typedef int32_t (*tt_fn)(void **);

typedef struct {
    tt_fn fn;
    int n_in, n_params;
    int type_num[MAX_PARAMS], ndim[MAX_PARAMS];
    npy_intp dims[MAX_PARAMS][MAX_DIMS];
    npy_intp nbytes[MAX_PARAMS];
    PyObject *name;
} spec_t;

static PyObject *error_class = NULL;

static void spec_free(PyObject *cap) {
    spec_t *s = (spec_t *)PyCapsule_GetPointer(cap, "tt_spec");
    if (s) { Py_XDECREF(s->name); PyMem_Free(s); }
}

/* spec(fn_address, name, n_in, ((type_num, shape), ...)) -> capsule */
static PyObject *make_spec(PyObject *self, PyObject *args) {
    unsigned long long addr; PyObject *name, *params; int n_in;
    if (!PyArg_ParseTuple(args, "KUiO!", &addr, &name, &n_in, &PyTuple_Type, &params))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(params);
    if (n > MAX_PARAMS || n_in > n) Py_RETURN_NONE;
    spec_t *s = (spec_t *)PyMem_Calloc(1, sizeof(spec_t));
    if (!s) return PyErr_NoMemory();
    s->fn = (tt_fn)(uintptr_t)addr; s->n_in = n_in; s->n_params = (int)n;
    for (Py_ssize_t i = 0; i < n; ++i) {
        int tn; PyObject *shape;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(params, i), "iO!", &tn, &PyTuple_Type, &shape)
            || PyTuple_GET_SIZE(shape) > MAX_DIMS) {
            PyMem_Free(s);
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
        s->type_num[i] = tn; s->ndim[i] = (int)PyTuple_GET_SIZE(shape);
        PyArray_Descr *d = PyArray_DescrFromType(tn);
        if (!d) { PyMem_Free(s); return NULL; }
        npy_intp nb = PyDataType_ELSIZE(d);
        Py_DECREF(d);
        for (int k = 0; k < s->ndim[i]; ++k) {
            s->dims[i][k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
            nb *= s->dims[i][k];
        }
        s->nbytes[i] = nb;
    }
    Py_INCREF(name); s->name = name;
    return PyCapsule_New(s, "tt_spec", spec_free);
}

/* An exact ndarray of parameter i's dtype, shape and C layout. */
static int matches(const spec_t *s, int i, PyObject *o) {
    if (!PyArray_CheckExact(o)) return 0;
    PyArrayObject *a = (PyArrayObject *)o;
    if (PyArray_TYPE(a) != s->type_num[i] || PyArray_NDIM(a) != s->ndim[i]
        || !PyArray_ISNOTSWAPPED(a) || !PyArray_IS_C_CONTIGUOUS(a)) return 0;
    npy_intp *d = PyArray_DIMS(a);
    for (int k = 0; k < s->ndim[i]; ++k) if (d[k] != s->dims[i][k]) return 0;
    return 1;
}

/* A fresh array of parameter i whose data starts on a 64-byte boundary. */
static PyObject *aligned_new(const spec_t *s, int i) {
    npy_intp nb = s->nbytes[i] + 64;
    PyObject *raw = PyArray_SimpleNew(1, &nb, NPY_UINT8);
    if (!raw) return NULL;
    char *p = PyArray_DATA((PyArrayObject *)raw);
    p += (64 - ((uintptr_t)p & 63)) & 63;
    PyArray_Descr *d = PyArray_DescrFromType(s->type_num[i]);
    PyObject *a = PyArray_NewFromDescr(&PyArray_Type, d, s->ndim[i], (npy_intp *)s->dims[i],
                                       NULL, p, NPY_ARRAY_CARRAY, NULL);
    if (!a) { Py_DECREF(raw); return NULL; }
    if (PyArray_SetBaseObject((PyArrayObject *)a, raw) < 0) { Py_DECREF(a); return NULL; }
    return a;
}

static int overlaps(PyObject *x, PyObject *y) {
    char *a = PyArray_BYTES((PyArrayObject *)x), *b = PyArray_BYTES((PyArrayObject *)y);
    npy_intp na = PyArray_NBYTES((PyArrayObject *)x), nb = PyArray_NBYTES((PyArrayObject *)y);
    return na > 0 && nb > 0 && a < b + nb && b < a + na;
}

/* call(spec, inputs, out) -> the outputs (``out`` itself when given), or NotImplemented
   when an argument needs the Python path's checks. */
static PyObject *call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_CheckExact(args[1])) Py_RETURN_NOTIMPLEMENTED;
    spec_t *s = (spec_t *)PyCapsule_GetPointer(args[0], "tt_spec");
    if (!s) return NULL;
    PyObject *ins = args[1], *out = args[2];
    if (PyTuple_GET_SIZE(ins) != s->n_in) Py_RETURN_NOTIMPLEMENTED;
    int n_out = s->n_params - s->n_in;
    PyObject *outs[MAX_PARAMS];
    void *argv[MAX_PARAMS];
    for (int i = 0; i < s->n_in; ++i) {
        PyObject *o = PyTuple_GET_ITEM(ins, i);
        if (!matches(s, i, o)) Py_RETURN_NOTIMPLEMENTED;
        argv[i] = PyArray_DATA((PyArrayObject *)o);
    }
    if (out == Py_None) {
        for (int j = 0; j < n_out; ++j) {
            outs[j] = aligned_new(s, s->n_in + j);
            if (!outs[j]) { for (int q = 0; q < j; ++q) Py_DECREF(outs[q]); return NULL; }
        }
    } else {
        PyObject *seq = NULL;
        if (PyList_CheckExact(out) || PyTuple_CheckExact(out)) {
            seq = out;
            if (PySequence_Fast_GET_SIZE(seq) != n_out) Py_RETURN_NOTIMPLEMENTED;
        } else if (n_out != 1) Py_RETURN_NOTIMPLEMENTED;
        for (int j = 0; j < n_out; ++j) {
            PyObject *o = seq ? PySequence_Fast_GET_ITEM(seq, j) : out;
            if (!matches(s, s->n_in + j, o) || !PyArray_ISWRITEABLE((PyArrayObject *)o))
                Py_RETURN_NOTIMPLEMENTED;
            for (int i = 0; i < s->n_in; ++i)
                if (overlaps(o, PyTuple_GET_ITEM(ins, i))) Py_RETURN_NOTIMPLEMENTED;
            for (int q = 0; q < j; ++q)
                if (overlaps(o, outs[q])) Py_RETURN_NOTIMPLEMENTED;
            outs[j] = o;
        }
    }
    for (int j = 0; j < n_out; ++j) argv[s->n_in + j] = PyArray_DATA((PyArrayObject *)outs[j]);
    int32_t rc;
    Py_BEGIN_ALLOW_THREADS
    rc = s->fn(argv);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        if (out == Py_None) for (int j = 0; j < n_out; ++j) Py_DECREF(outs[j]);
        PyErr_Format(error_class ? error_class : PyExc_RuntimeError,
                     "kernel %U returned error code %d", s->name, (int)rc);
        return NULL;
    }
    if (out != Py_None) { Py_INCREF(out); return out; }
    if (n_out == 1) return outs[0];
    PyObject *t = PyTuple_New(n_out);
    if (!t) { for (int j = 0; j < n_out; ++j) Py_DECREF(outs[j]); return NULL; }
    for (int j = 0; j < n_out; ++j) PyTuple_SET_ITEM(t, j, outs[j]);
    return t;
}

static PyObject *set_error(PyObject *self, PyObject *cls) {
    Py_XDECREF(error_class); Py_INCREF(cls); error_class = cls;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"spec", make_spec, METH_VARARGS, "a kernel's call specification"},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call a kernel"},
    {"set_error", set_error, METH_O, "the exception class of a kernel's error code"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tt_call", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tt_call(void) {
    import_array();
    return PyModule_Create(&module);
}
"""

_loaded: ModuleType | None = None
_tried = False
REASON = ""     # why ``load`` returned None, if it did


def load() -> ModuleType | None:
    """The ``_tt_call`` extension, built at the first use on this machine (about a
    second of gcc) and cached by its source, the compiler, Python's and NumPy's
    versions; None where it cannot be built (``REASON`` says why) or where
    ``TENSORTUNE_FAST_CALL=0``."""
    global _loaded, _tried, REASON
    if _tried:
        return _loaded
    _tried = True
    if os.environ.get("TENSORTUNE_FAST_CALL", "1") == "0":
        REASON = "TENSORTUNE_FAST_CALL=0"
        return None
    try:
        _loaded = _build_and_import()
    except (OSError, subprocess.SubprocessError, ImportError) as e:
        REASON = f"{type(e).__name__}: {e}"
        return None
    from ..errors import TensorTuneError

    _loaded.set_error(TensorTuneError)
    return _loaded


def _build_and_import() -> ModuleType:
    import numpy as np

    py_inc = sysconfig.get_paths()["include"]
    if not Path(py_inc, "Python.h").is_file():
        raise ImportError(f"no Python.h in {py_inc} (a Python without its headers)")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    cc = os.environ.get("CC", "gcc")
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{py_inc}", f"-I{np.get_include()}"]
    key = hashlib.sha256("\0".join([SOURCE, *cmd, np.__version__, suffix]).encode())
    where = default_cache_dir() / "call" / key.hexdigest()[:24]
    lib = where / f"_tt_call{suffix}"
    if not lib.is_file():
        where.mkdir(parents=True, exist_ok=True)
        src = where / "_tt_call.c"
        src.write_text(SOURCE)
        # Built under a temporary name and renamed: another process never loads half a file.
        fd, tmp = tempfile.mkstemp(suffix=suffix, dir=where)
        os.close(fd)
        try:
            done = subprocess.run([*cmd, str(src), "-o", tmp], capture_output=True,
                                  text=True, timeout=120)
            if done.returncode != 0:
                raise ImportError(f"{cc} failed: {done.stderr.strip()[-400:]}")
            os.replace(tmp, lib)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    spec = importlib.util.spec_from_file_location("_tt_call", lib)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {lib}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
