"""Names that reach generated C++: plain identifiers, not C++ keywords, CUDA built-ins or
ncdc's own prefixes. Every tensor, axis and diagram name is checked here.
"""

from __future__ import annotations

import re

from ncdc.errors import SpecError
from ncdc.language.text import shown

MAX_NAME_LENGTH = 48


# Names that would break or hijack generated C++: keywords, CUDA built-ins, our prefixes;
# and `inf`, which an operation line reads as a number.
_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast
    else enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    threadIdx blockIdx blockDim gridDim warpSize dim3 half float2 float4 int4 uint4 uint2
    size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    main NULL INFINITY NAN min max std inf""".split()
)


IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


def check_identifier(name: str, what: str, where: str) -> None:
    """Names reach generated C++, so they must be plain identifiers and not reserved."""
    if not IDENTIFIER.match(name):
        raise SpecError(
            f"expected a {what} made of letters, digits and '_' starting with a "
            f"letter, found {shown(name)}",
            where=where,
            hint="e.g. `Q`, `scores`, `d_head`",
        )
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(
            f"{what} '{name[:20]}...' is {len(name)} characters; expected at most "
            f"{MAX_NAME_LENGTH}",
            where=where,
        )
    if name in _RESERVED:
        raise SpecError(
            f"{what} '{name}' is reserved in generated C++", where=where, hint=f"e.g. '{name}_'"
        )
    if name.lower().startswith(("ncdc", "cuda")) or "__" in name:
        # Generated code names its own variables ncdc_*; C++ reserves names with '__'.
        raise SpecError(
            f"{what} '{name}' is reserved in generated C++",
            where=where,
            hint="names may not start with ncdc or cuda, nor contain '__'",
        )
