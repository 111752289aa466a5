"""Vector math for vectorized loops, in plain GNU C vector code (no intrinsics headers;
the few x86 builtins sit under the ISA's macro, so the same source builds for SSE, AVX2
and AVX-512, and elsewhere).

Three kinds of helper per vector type ``tt_f32x16`` and the like:
- min and max: gcc's x86 builtins of ``minps``/``maxps`` (and their 256- and 512-bit
  and double forms) where the compiler defines the ISA's macro, else a lane loop;
- lane loops (sqrt, fabs): one C expression per lane, which gcc's SLP vectorizer turns
  into one instruction (`sqrtf` is `vsqrtps` under `-fno-math-errno`);
- polynomials for float32 exp, erf, tanh and log, and rationals for float64 exp, tanh
  and log, which libm has no vector form of without `-ffast-math`; each is checked
  against a float64 (for float64, NumPy's) reference in tests/test_vmath.py.

A vectorized loop that calls anything else (pow, float64 erf, ...) stays scalar.

Example:
    >>> "tt_vtanh_f32x8" in vector_math("float32", 8)
    True
"""

from __future__ import annotations

from .c_header import libm_name

# Calls every float type gets as a lane loop of its libm function.
LANE_CALLS = ("sqrt", "fabs")
# Calls with a float32 polynomial below.
POLY_CALLS = ("exp", "erf", "tanh", "log")
# Calls with a float64 one.
POLY_CALLS_F64 = ("exp", "tanh", "log")


def has_vector_form(name: str, dtype: str) -> bool:
    """Whether a vectorized loop can call ``name`` on ``dtype`` lanes (else it stays
    scalar).

    >>> has_vector_form("exp", "float64"), has_vector_form("erf", "float64")
    (True, False)
    """
    return name in LANE_CALLS or name in (POLY_CALLS if dtype == "float32" else
                                          POLY_CALLS_F64 if dtype == "float64" else ())


def vector_math(dtype: str, w: int) -> str:
    """The C helpers of the ``w``-lane vector type of ``dtype`` (after its typedefs and
    ``tt_vsel``)."""
    vt = f"tt_{'f32' if dtype == 'float32' else 'f64'}x{w}"
    s = vt[3:]
    out = [_min_max(dtype, w, vt, name, cmp) for name, cmp in (("max", ">"), ("min", "<"))]
    for name in LANE_CALLS:
        out.append(f"static inline {vt} tt_v{name}_{s}({vt} a) {{ {vt} r;\n"
                   f"  for (int i = 0; i < {w}; ++i) r[i] = {libm_name(name, dtype)}(a[i]);"
                   f" return r; }}\n")
    poly = _VEXP + _VERF + _VTANH + _VLOG if dtype == "float32" else \
        _VEXP64 + _VTANH64 + _VLOG64 if dtype == "float64" else ""
    out.append(poly.replace("V", vt).replace("M", f"tt_m{s}").replace("S", s))
    return "".join(out)


# gcc's x86 min/max builtins by (dtype, lanes): the macro that says the ISA has them, the
# builtin's name and its trailing arguments (the 512-bit forms take a merge source, a
# full mask and the current rounding mode, 4). maxps(a, b) is `a > b ? a : b` lane by
# lane, NaN and signed zeros included, so the lane loop below is the same function. Why
# not only the lane loop: gcc's SLP vectorizer turns it into one maxps only in some
# contexts. In others it is a compare and two masked moves (the exp's clamps: SMX's best
# program ran 1.23x faster with the builtins) or, for a max carried in a register across
# a loop, 16 scalar maxss (a softmax row by hand: 41.5 us with the lane loops, 17.5 with
# the builtins; RESULTS.md).
_X86_MIN_MAX = {
    ("float32", 4): ("__SSE__", "ps", ""),
    ("float32", 8): ("__AVX__", "ps256", ""),
    ("float32", 16): ("__AVX512F__", "ps512_mask", ", a, (unsigned short)-1, 4"),
    ("float64", 2): ("__SSE2__", "pd", ""),
    ("float64", 4): ("__AVX__", "pd256", ""),
    ("float64", 8): ("__AVX512F__", "pd512_mask", ", a, (unsigned char)-1, 4"),
}


def _min_max(dtype: str, w: int, vt: str, name: str, cmp: str) -> str:
    """``tt_vmax_S`` or ``tt_vmin_S``: the x86 builtin where gcc has it, else lane by lane
    (clang and other targets, and widths with no builtin)."""
    s = vt[3:]
    head = f"static inline {vt} tt_v{name}_{s}({vt} a, {vt} b) {{"
    lanes = (f"{head} {vt} r;\n  for (int i = 0; i < {w}; ++i) "
             f"r[i] = a[i] {cmp} b[i] ? a[i] : b[i]; return r; }}\n")
    if (dtype, w) not in _X86_MIN_MAX:
        return lanes
    isa, suffix, rest = _X86_MIN_MAX[dtype, w]
    return (f"#if defined({isa}) && defined(__GNUC__) && !defined(__clang__)\n"
            f"{head}\n  return __builtin_ia32_{name}{suffix}(a, b{rest}); }}\n"
            f"#else\n{lanes}#endif\n")


# The templates below spell the vector type V, its mask type M and the type's suffix S.

# exp(x): Cody-Waite reduction x = n ln2 + r and cephes' degree-6 polynomial for e^r,
# then 2^n built in the exponent bits (relative error < 1e-7). n = round(x / ln2) by
# adding and subtracting 1.5 * 2^23 (two instructions where a floor takes six), which
# also keeps r in [-ln2/2, ln2/2], the range cephes fitted the polynomial on; n stops at
# 127 so that 2^n stays a normal float at the top of the range. At the bottom x stops at
# -88.3, where n = -127 makes 2^n's bits all zero: e^x is 0 from there down (-inf
# included). It stopped at -87.3 before, which gave the least normal float for -inf; a
# softmax's division made that a denormal, and an attention's product over those
# probabilities ran 7.5x slower (a key padding mask; RESULTS.md). Between the two, e^x
# is the denormal it is.
_VEXP = """static inline V tt_vexp_S(V x) {
  x = tt_vmin_S(tt_vmax_S(x, (V){} - 88.3f), (V){} + 88.7f);
  V f = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  f = tt_vmin_S(f, (V){} + 127.0f);
  V r = x - f * 0.693359375f + f * 2.12194440e-4f;
  V p = (V){} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f; p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  M e = (__builtin_convertvector(f, M) + 127) << 23;
  return p * (V)e;
}
"""

# float64 exp(x): the same reduction in double (n = round(x / ln2) by adding and
# subtracting 1.5 * 2^52; ln2 in two parts) and cephes' rational for e^r,
# 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)) (relative error ~2e-16 on [-ln2/2, ln2/2]); n
# stops at 1023 so that 2^n is a normal double; x stops at -709, where n = -1023 makes
# 2^n 0, as the float32 exp. A float64 exp was libm's scalar call: 0.72x PyTorch over a
# 1024 x 1024 array on the AVX-512 host (RESULTS.md).
_VEXP64 = """static inline V tt_vexp_S(V x) {
  x = tt_vmin_S(tt_vmax_S(x, (V){} - 709.0), (V){} + 709.78271289338400);
  V f = (x * 1.4426950408889634074 + 6755399441055744.0) - 6755399441055744.0;
  f = tt_vmin_S(f, (V){} + 1023.0);
  V r = x - f * 6.93145751953125e-1 - f * 1.42860682030941723212e-6;
  V z = r * r;
  V p = (V){} + 1.26177193074810590878e-4;
  p = p * z + 3.02994407707441961300e-2; p = (p * z + 9.99999999999999999910e-1) * r;
  V q = (V){} + 3.00198505138664455042e-6;
  q = q * z + 2.52448340349684104192e-3; q = q * z + 2.27265548208155028766e-1;
  q = q * z + 2.00000000000000000009e0;
  V e = 1.0 + 2.0 * (p / (q - p));
  M n = (__builtin_convertvector(f, M) + 1023) << 52;
  return e * (V)n;
}
"""


def _tanh(small: str, f: str) -> str:
    """tanh's template: ``small`` (C lines that set ``small`` from ``x`` and ``z = x * x``)
    below |x| = 0.625; above, 1 - 2 / (e^2|x| + 1) with x's sign, both computed and one
    kept per lane. ``f`` is the literal suffix of the type ("f" for float32)."""
    return f"""static inline V tt_vtanh_S(V x) {{
  V a = tt_vmax_S(x, -x);
  V z = x * x;
{small}  V big = 1.0{f} - 2.0{f} / (tt_vexp_S(a + a) + 1.0{f});
  big = tt_vsel_S(x < (V){{}}, -big, big);
  return tt_vsel_S(a < (V){{}} + 0.625{f}, small, big);
}}
"""


# float64 tanh(x): as the float32 one, with cephes' double rational x + x^3 P(x^2) /
# Q(x^2) below |x| = 0.625.
_VTANH64 = _tanh("""  V p = (V){} - 9.64399179425052238628e-1;
  p = p * z - 9.92877231001918586564e1; p = p * z - 1.61468768441708447952e3;
  V q = z + 1.12811678491632931402e2;
  q = q * z + 2.23548839060100448583e3; q = q * z + 4.84406305325125486048e3;
  V small = x + x * z * (p / q);
""", "")

# float64 log(x): as the float32 one (m in [sqrt(1/2), sqrt(2)), subnormals scaled by
# 2^54 first), with cephes' double rational m - m^2 / 2 + m^3 P(m) / Q(m).
_VLOG64 = """static inline V tt_vlog_S(V x) {
  M den = x < (V){} + 2.2250738585072014e-308;
  V xs = tt_vsel_S(den, x * 18014398509481984.0, x);
  M i = (M)xs;
  M e = ((i >> 52) & 0x7ff) - 1022 + (den & -54);
  V m = (V)((i & 0x000fffffffffffffLL) | 0x3fe0000000000000LL);
  M lo = m < (V){} + 0.70710678118654752440;
  e = e + lo;
  m = m + (V)(lo & (M)m) - 1.0;
  V z = m * m;
  V p = (V){} + 1.01875663804580931796e-4;
  p = p * m + 4.97494994976747001425e-1; p = p * m + 4.70579119878881725854e0;
  p = p * m + 1.44989225341610930846e1; p = p * m + 1.79368678507819816313e1;
  p = p * m + 7.70838733755885391666e0;
  V q = m + 1.12873587189167450590e1;
  q = q * m + 4.52279145837532221105e1; q = q * m + 8.29875266912776603211e1;
  q = q * m + 7.11544750618563894466e1; q = q * m + 2.31251620126765340583e1;
  V fe = __builtin_convertvector(e, V);
  V y = m * (z * p / q) + fe * -2.121944400546905827679e-4 - 0.5 * z;
  V r = m + y + fe * 0.693359375;
  r = tt_vsel_S(x == (V){} + __builtin_inf(), x, r);
  V bad = tt_vsel_S(x == (V){}, (V){} - __builtin_inf(), (V){} + __builtin_nan(""));
  return tt_vsel_S(x > (V){}, r, bad);
}
"""

# erf(x): x * P(x^2) / Q(x^2), a degree-5/5 rational fitted (least squares on the
# relative error, x in (0, 4]) for this project; 4e-7 relative error in float32; |x| is
# clamped at 4, where erf(x) is 1 in float32.
_VERF = """static inline V tt_verf_S(V x) {
  x = tt_vmin_S(tt_vmax_S(x, (V){} - 4.0f), (V){} + 4.0f);
  V t = x * x;
  V p = (V){} + 2.0446568403e-06f;
  p = p * t + 2.8374317522e-04f; p = p * t + 3.7413587922e-03f;
  p = p * t + 5.2666290101e-02f; p = p * t + 1.8991267026e-01f;
  p = p * t + 1.1283791501e+00f;
  V q = (V){} + 3.7979550234e-05f;
  q = q * t + 1.1556873496e-03f; q = q * t + 1.4919072645e-02f;
  q = q * t + 1.1388980582e-01f; q = q * t + 5.0163855674e-01f;
  q = q * t + 1.0000000000e+00f;
  return x * p / q;
}
"""

# tanh(x): below |x| = 0.625 cephes' odd polynomial x + x^3 P(x^2) (1 - 2 / (e^2x + 1)
# would cancel there); above, 1 - 2 / (e^2|x| + 1) with x's sign. Both are computed and
# one kept per lane.
_VTANH = _tanh("""  V p = (V){} - 5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f; p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f; p = p * z - 3.33332819422e-1f;
  V small = p * z * x + x;
""", "f")

# log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), then cephes' degree-9 polynomial for
# log(m) and e ln2 added in two parts. Subnormals are scaled by 2^23 first; 0 gives
# -inf, a negative or NaN input NaN, +inf itself.
_VLOG = """static inline V tt_vlog_S(V x) {
  M den = x < (V){} + 1.17549435e-38f;
  V xs = tt_vsel_S(den, x * 8388608.0f, x);
  M i = (M)xs;
  M e = ((i >> 23) & 0xff) - 126 + (den & -23);
  V m = (V)((i & 0x007fffff) | 0x3f000000);
  M lo = m < (V){} + 0.707106781186547524f;
  e = e + lo;
  m = m + (V)(lo & (M)m) - 1.0f;
  V z = m * m;
  V p = (V){} + 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f; p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f; p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f; p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f; p = p * m + 3.3333331174e-1f;
  V fe = __builtin_convertvector(e, V);
  V y = p * m * z + fe * -2.12194440e-4f - 0.5f * z;
  V r = m + y + fe * 0.693359375f;
  r = tt_vsel_S(x == (V){} + __builtin_inff(), x, r);
  V bad = tt_vsel_S(x == (V){}, (V){} - __builtin_inff(), (V){} + __builtin_nanf(""));
  return tt_vsel_S(x > (V){}, r, bad);
}
"""
