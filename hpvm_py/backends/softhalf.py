"""f16 <-> f32 conversions in software, for x86-64 CPUs without F16C.

Without F16C, LLVM converts between half and float by calling compiler-rt's `__extendhfsf2` and
`__truncsfhf2`, which this process does not have: jit.py compiles these definitions once and
gives the JIT their addresses. They convert as F16C's VCVTPH2PS / VCVTPS2PH do: exactly one way,
to nearest even the other, subnormals kept, overflow to infinity, a NaN made quiet with the top
of its payload. (IR text: this module is imported with hpvm_py, llvmlite only on first use.)
"""
from __future__ import annotations

HELPERS = ("__extendhfsf2", "__truncsfhf2")

# float __extendhfsf2(half): exact. A subnormal is its mantissa * 2**-24 (both factors and the
# product exact in float); exponent 31 is an infinity or a NaN, made quiet.
_EXTEND = """
define float @__extendhfsf2(half %h) {
  %bits = bitcast half %h to i16
  %x = zext i16 %bits to i32
  %s16 = and i32 %x, 32768
  %sign = shl i32 %s16, 16
  %e0 = lshr i32 %x, 10
  %exponent = and i32 %e0, 31
  %mantissa = and i32 %x, 1023
  %e1 = add i32 %exponent, 112
  %e2 = shl i32 %e1, 23
  %m13 = shl i32 %mantissa, 13
  %normal = or i32 %e2, %m13
  %isnan = icmp ne i32 %mantissa, 0
  %quiet = select i1 %isnan, i32 4194304, i32 0
  %inf = or i32 2139095040, %m13
  %special = or i32 %inf, %quiet
  %mf = uitofp i32 %mantissa to float
  %tf = fmul float %mf, 0x3E70000000000000
  %tiny = bitcast float %tf to i32
  %isspecial = icmp eq i32 %exponent, 31
  %big = select i1 %isspecial, i32 %special, i32 %normal
  %issmall = icmp eq i32 %exponent, 0
  %magnitude = select i1 %issmall, i32 %tiny, i32 %big
  %r = or i32 %sign, %magnitude
  %f = bitcast i32 %r to float
  ret float %f
}
"""

# half __truncsfhf2(float): to nearest even. A normal half: the exponent rebiased, then the 13 bits
# dropped rounded (a carry into the exponent is right, up to the largest finite half); from 65520
# up, infinity; below 2**-14, |f| * 2**24 (exact) rounded to an integer by adding and removing
# 2**23 (no fast-math: LLVM keeps both), 1024 being the smallest normal's encoding.
_TRUNCATE = """
define half @__truncsfhf2(float %f) {
  %x = bitcast float %f to i32
  %s0 = lshr i32 %x, 16
  %sign = and i32 %s0, 32768
  %a = and i32 %x, 2147483647
  %p0 = lshr i32 %a, 13
  %payload = and i32 %p0, 1023
  %nan = or i32 %payload, 32256
  %rebiased = sub i32 %a, 939524096
  %o0 = lshr i32 %rebiased, 13
  %odd = and i32 %o0, 1
  %n0 = add i32 %rebiased, 4095
  %n1 = add i32 %n0, %odd
  %normal = lshr i32 %n1, 13
  %af = bitcast i32 %a to float
  %scaled = fmul float %af, 0x4170000000000000
  %up = fadd float %scaled, 0x4160000000000000
  %rounded = fsub float %up, 0x4160000000000000
  %tiny = fptoui float %rounded to i32
  %isnormal = icmp uge i32 %a, 947912704
  %finite = select i1 %isnormal, i32 %normal, i32 %tiny
  %isinf = icmp uge i32 %a, 1199566848
  %bounded = select i1 %isinf, i32 31744, i32 %finite
  %isnan = icmp ugt i32 %a, 2139095040
  %magnitude = select i1 %isnan, i32 %nan, i32 %bounded
  %r32 = or i32 %sign, %magnitude
  %r16 = trunc i32 %r32 to i16
  %h = bitcast i16 %r16 to half
  ret half %h
}
"""


def helpers_ir() -> str:
    """The IR of both helpers."""
    return _EXTEND + _TRUNCATE
