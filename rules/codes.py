"""Codes in every printed form, looked up in the catalogues.

One scan of a chunk finds every code, whatever form prints it:

- ACL/runtime return codes: ``error code is 507035``, ``error code:507035``,
  ``runtime result = 507014``, ``ret=507033``, ``error_code: N``, ``result = N``,
  ``ErrCode=107001``, ``errorCode = 507033``, ``error no is 561103``, ``return: 507015``,
  ``rtKernelLaunchWithHandleV2 failed: 507035``;
- runtime reason texts: ``reason=[aicore timeout]``, ``reason=lost heartbeat[FUNC:...]``,
  ``ErrCode=507899, desc=[driver error:internal error]``, ``retCode=0x31, [vector core
  exception]``;
- torch_npu's English text of a code: ``[Error]: The aicore execution times out.``;
- CANN error-message codes: ``EL0004: ...``, ``EE9999[PID: ...]``,
  ``Memory_Allocation_Failure(EL0004)``;
- HCCL results: ``HCCL function error: <call>, error code is 11``, ``hcclRet -> 19``,
  ``errNo[0x0000000005010009]``, ``HCCL error in: <file>:<line>, error code is 9``,
  ``HCCL error, error code is 12``, HCCL Test's ``retcode: 11``;
- NPU device fault codes: ``Error Code : 80E01801``, ``event_id=0x80e18005``, ``fault code 0x...``;
- dcmi returns: ``ret is -8005``, ``ret=-8020``;
- ACL and HCCL codes by name: ``returned ACL_ERROR_RT_AICORE_TIMEOUT``, ``HCCL_E_TIMEOUT``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ascend_doctor.core import regex
from ascend_doctor.rules.catalogue import Catalogues, Entry
from ascend_doctor.rules.lines import parsed_at
from ascend_doctor.rules.parse import Parsed
from ascend_doctor.rules.stated import harmless

# The number is checked against the catalogue: a keyword before a six-digit number is not
# enough by itself (a port, a pid), so unknown numbers are dropped.
_ACL = (
    rb"(?:error code(?: is|\s?[:=])|error_code\s?[:=]|errorCode\s?[:=]|ErrCode\s?=|result\s?="
    rb"|ret(?:Code)?\s?[:=]|error no is|return:|failed:|errno\[)\s?(?P<acl>[1-5]\d{5})(?!\d)"
)
# the runtime prints "<api> execute failed, reason=[<text>]" (hicann/runtime errcode_manage.cc):
# a bracketed text is read whole (up to 200 bytes: "Failed to create the stream object. The
# host memory has been exhausted."), an unbracketed one up to its first sentence's end
#
# The same texts follow a code the runtime already names: its GetErrorDesc prints
# "ErrCode=%d, desc=[%s], InnerCode=0x%x" (rtGetDeviceCount:ErrCode=507899, desc=[driver
# error:internal error], InnerCode=0x7020010), and its task and stream errors print the TS
# error's text after a hex code, "retCode=%#x, [%s]" (Kernel task happen error,
# retCode=0x31, [vector core exception]; davinci_kernel_task.cc, stream.cc, engine.cc). The
# text is read as a reason whatever the number beside it is: a code the catalogue lacks or
# a hex TS code no catalogue holds.
_REASON = (
    rb"(?:reason|desc)=\[(?P<reasonb>[a-zA-Z][^\]\[\n]{2,200})\]"
    rb"|retCode=0x[0-9a-fA-F]{1,8}, \[(?P<reasont>[a-zA-Z][^\]\[\n]{2,200})\]"
    rb"|reason=\[?(?P<reason>[a-zA-Z][\w :+/-]{2,60}?)(?:\]|\[FUNC|$|\.\s|\.$)"
)
_ERRTEXT = rb"\[Error\]: (?P<errtext>[A-Z][^\n\[]{4,160}?\.)\s*(?:$|\[|\n)"
_CANN = rb"(?<![\w.])(?P<cann>E[0-9A-Z]\d{4})(?=[:\[)\]]|\s|$|\.(?!\d))"
# torch_npu's older HCCL checks print the HcclResult too (Ascend/pytorch
# v5.0.rc2.alpha002-pytorch1.11.0 torch_npu/csrc/distributed/HCCLUtils.hpp HCCL_CHECK_ERROR:
# "HCCL error in: FILE:LINE.\n HCCL error, error code is N. [error]: ..."; the same check
# quoted on one line, "HCCL error in: FILE:LINE, error code is N"), HCCLUtils.cpp
# checkForHcclError "Failed to get HCCL error code: N" (9e73e70), and HCCL Test's HCCLCHECK
# "hccl interface return err FILE:LINE, retcode: N" (CANN tools/hccl_test)
_HCCL = (
    rb"(?:HCCL function error: [^\n]{0,200}?, error code is |OPS function error: Hccl\w{1,40}, "
    rb"error code is |HCCL error, error code is |HCCL error in: [^\n]{0,200}?, error code is "
    rb"|Failed to get HCCL error code: |hccl interface return err[^\n]{0,300}?, retcode: "
    rb"|hcclRet -> |fail(?:ed)?[^\n]{0,80}?\bret\[)(?P<hccl>\d{1,2})(?!\d)"
)
# HCCL's plog prints its result as errNo[0x%016llx]: the module id (5) in bits 24-31, the
# submodule (HCCL 0, HCOM 1) in bits 16-23 and the HcclResult in the low bits
# (hicann/hccl src/common/log.h HCCL_ERROR_CODE)
_HCCL_ERRNO = rb"errNo\[0x(?P<hcclerr>0{8}0[05]0[01]00[0-9a-fA-F]{2})\]"
_FAULT = (
    rb"(?:[Ee]vent[ _]?[Ii][Dd]\s?[:=]\s?\[?|[Ee]rror [Cc]ode\s{0,40}:\s{0,3}"
    rb"|[Ff]ault[ _]?[Cc]ode\s?[:=]?\s?)"
    rb"(?:0x)?(?P<fault>[0-9A-Fa-f]{8})(?![0-9A-Fa-f])"
)
_DCMI = rb"(?:ret(?: is|\s?[:=])|error code)\s?(?P<dcmi>-8\d{3}|-9999\d)(?!\d)"
# the code by its name, as C++ callers and HCCL print it ("returned ACL_ERROR_RT_AICORE_TIMEOUT",
# "ret[HCCL_E_TIMEOUT]"): the aclError and HcclResult enumerators the catalogues name
_NAME = rb"(?<![\w])(?P<name>ACL_ERROR_[A-Z0-9_]{2,60}|HCCL_E_[A-Z0-9_]{2,30})(?![\w])"

_FORMS = (_ACL, _REASON, _ERRTEXT, _CANN, _HCCL, _HCCL_ERRNO, _FAULT, _DCMI, _NAME)
FIRST_BYTES = b"eErf[HOhFAd"
"""Every byte a form can start with. A lookahead on them first makes ``re`` try the forms'
dozens of branches only where one can start: the same matches at twice the speed (a
failure-dense log has a code word on every other line)."""
CODE_PATTERN = regex.compile(
    b"(?=[" + re.escape(FIRST_BYTES) + b"])(?:" + b"|".join(_FORMS) + b")", re.MULTILINE
)
"""Every form at once: one pass over a chunk (C speed)."""

CODE_KEYS = (
    r"error code|error_code|errorCode|ErrCode|result ?=|ret(?:Code)? ?[:=]|error no is|return:"
    r"|failed:|errno\[|errNo\[|reason=|desc=\[|\[Error\]: |HCCL function error"
    r"|OPS function error|hcclRet|retcode: "
    r"|ret\[|[Ee]vent[ _]?[Ii][Dd]|[Ee]rror [Cc]ode|[Ff]ault[ _]?[Cc]ode|ret is"
    r"|E[0-9A-Z][0-9]{4}|ACL_ERROR_|HCCL_E_"
)
"""Words that stand before (or are) a code: a line holding none has no code. Scanned with the
rules in one pass; only the lines it finds are searched with ``CODE_PATTERN``."""

_GROUP_KIND = {
    "acl": "acl",
    "reason": "runtime_reason",
    "reasonb": "runtime_reason",
    "reasont": "runtime_reason",
    "errtext": "acl",
    "cann": "cann",
    "hccl": "hccl",
    "hcclerr": "hccl",
    "fault": "device_fault",
    "dcmi": "dcmi",
    "name": "acl",
}

DEVICE = regex.compile(
    rb"(?:Device\[(\d+)\]|device_id=(\d+)|\(device=(\d+)|[Dd]evice (\d+)\b|chipId:(\d+)"
    rb"|Device:(\d+)|NPU (\d+)\b|device\((\d+)\))"
)
"""Where a line names its device: runtime, driver, torch_npu and npu-smi forms."""


@dataclass(frozen=True, slots=True)
class CodeHit:
    """A code found in a chunk, with its catalogue entry."""

    start: int
    """Byte offset of the match in the chunk."""
    entry: Entry
    """What the code means."""
    printed: str
    """The code as printed (for the summary)."""


class CodeIndex:
    """The catalogues, ready for one-pass lookup (torch_npu texts resolve to ACL codes)."""

    def __init__(self, catalogues: Catalogues) -> None:
        self.catalogues = catalogues
        # torch_npu prints "[Error]: <the code's first sentence>"; a sentence several codes
        # share names the code only when they all mean the same category.
        texts: dict[str, list[Entry]] = {}
        for entry in catalogues.by_kind.get("acl", {}).values():
            texts.setdefault(_norm(entry.meaning), []).append(entry)
        self._texts = {t: es[0] for t, es in texts.items() if len({e.category for e in es}) == 1}
        self._names = {
            entry.name: entry
            for kind in ("acl", "hccl")
            for entry in catalogues.by_kind.get(kind, {}).values()
            if entry.name
        }
        # a reason as printed: case, spaces and a final full stop do not matter
        self._reasons = {
            _norm(text): entry
            for text, entry in catalogues.by_kind.get("runtime_reason", {}).items()
        }

    def lookup(self, group: str, value: str) -> Entry | None:
        """The entry a matched group names, if the catalogue knows it."""
        if group == "errtext":
            return self._texts.get(_norm(value))
        if group == "name":
            return self._names.get(value)
        kind = _GROUP_KIND[group]
        if group == "hcclerr":
            return self.catalogues.get(kind, str(int(value, 16) & 0xFF))
        if kind == "runtime_reason":
            return self._reason(value)
        if kind == "device_fault":
            return self.catalogues.get(kind, value.upper())
        return self.catalogues.get(kind, value)

    def _reason(self, value: str) -> Entry | None:
        """The ACL entry a runtime reason names: the whole text, else its first sentence (a
        bracketed reason the catalogue holds only in part); newer runtimes print a driver
        reason without its "driver error:" prefix."""
        reason = _norm(value)
        first = reason.split(". ", 1)[0]
        for text in (reason, first) if first != reason else (reason,):
            entry = self._reasons.get(text) or self._reasons.get("driver error:" + text)
            if entry is not None:
                return self.catalogues.get("runtime_reason", entry.code)
        return None

    def scan(
        self,
        data: bytes,
        start: int = 0,
        end: int | None = None,
        parsed: dict[int, Parsed] | None = None,
    ) -> Iterator[CodeHit]:
        """Every known code in ``data[start:end]`` that its line reports as a failure (see
        ``_reported``); ``parsed``: lines of ``data`` parsed already, by their start (the
        engine's memo, filled in here)."""
        memo: dict[int, Parsed] = {} if parsed is None else parsed
        for m in CODE_PATTERN.finditer(data, start, len(data) if end is None else end):
            group = m.lastgroup
            if group is None:
                continue
            value = m.group(group).decode("utf-8", "replace")
            entry = self.lookup(group, value)
            if entry is not None and _reported(data, m, memo):
                yield CodeHit(m.start(), entry, value)


_NOTICE = frozenset({"INFO", "DEBUG"})
"""Levels of a line that reports normal operation: a code in it is a setting, a sample's
expected result or a quoted value (a CANN runtime sample's "[INFO] ... returned 507035 after
stream abort, which is expected"; HCCL's "[INFO] ... failed, ret[9], ignore plugin
modification"), never the failure itself. A plog ``EVENT`` line reads as INFO."""


def _reported(data: bytes, m: re.Match[bytes], parsed: dict[int, Parsed]) -> bool:
    """Whether the line holding ``m`` reports the code as a failure: not when its logging
    header says INFO or DEBUG; not in a CANN plog/device WARNING line: a CANN component logs
    an operation that failed at ERROR, and at WARNING one it works around (HCCL's
    "HcclGetHcclAlgo failed, ret[9], try env variable.", "plugin init failed, ret[5], fall
    back to CostModel."; the runtime's "DeviceReOpen driver does not support, ret=207000";
    hicann/hccl 09300b7 and hicann/runtime 681ef76 src); and not in another WARNING that says
    it goes on another way ("falling back", "retrying": ``stated.harmless``). A line without a
    header always reports it (a CANN block's body, an exception), and torch_npu's "[W ...]
    Warning: NPU warning, error code is 507048" stays a failure: the task failed, the warning
    only reports it late."""
    line = data.rfind(b"\n", 0, m.start()) + 1
    stop = data.find(b"\n", m.start())
    stop = len(data) if stop < 0 else stop
    p = parsed_at(data, line, stop, parsed)
    if p.level in _NOTICE:
        return False
    if p.level != "WARNING":
        return True
    return p.header != "plog" and not harmless(data[line + p.message : stop])


def device_of(line: bytes) -> str:
    """The device a line names, or empty."""
    m = DEVICE.search(line)
    if m is None:
        return ""
    return next(g.decode() for g in m.groups() if g is not None)


def _norm(text: str) -> str:
    return " ".join(text.split()).rstrip(".").lower()


__all__ = ["CODE_KEYS", "CODE_PATTERN", "DEVICE", "CodeHit", "CodeIndex", "device_of"]
