"""Errors of the comparator. A difference between the paths is not an error: it is data
(mismatches and failed checks in the comparison). These are for what stops a comparison."""

from __future__ import annotations


class DualRunError(Exception):
    """The comparison could not be computed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class UnknownBusiness(DualRunError, LookupError):
    """No such business: neither the store nor the legacy side knows it."""

    def __init__(self, biz_code: str, detail: str = "") -> None:
        super().__init__(f"unknown business {biz_code!r}" + (f": {detail}" if detail else ""))
        self.biz_code = biz_code


class NoSourceSystem(DualRunError):
    """The legacy system of a business is not known: pass it explicitly."""

    def __init__(self, biz_code: str) -> None:
        super().__init__(f"business {biz_code!r} has no source system in the store: pass --source")
        self.biz_code = biz_code


class NoComparison(DualRunError, LookupError):
    """No comparison has been stored for this business yet."""

    def __init__(self, biz_code: str) -> None:
        super().__init__(f"no comparison stored for business {biz_code!r}: run `switchyard dualrun compare` first")
        self.biz_code = biz_code
