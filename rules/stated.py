"""How a line speaks of itself: the forms that make a line with no logging header an error
(``STATED_ERROR``, a build tool's ``TOOL_ERROR``, an indented ``CONTINUED_ERROR``), the words
that say an error is harmless or recovered from (``IGNORABLE``, ``FALLBACK``), the noise of a
process reporting another's exit (``EXIT_NOISE``), and the cheap word tests made before each
pattern (most candidate lines hold none of a pattern's words). Read by the unrecognised pass
(rules/unrecognised.py).
"""

from __future__ import annotations

from ascend_doctor.core import regex

IGNORABLE = regex.compile(
    rb"(?i:can (?:be )?(?:safely )?ignored?\b|safe to ignore"
    rb"|(?:please|you can|you may) (?:safely )?ignore|is harmless"
    rb"|(?:does|will) not affect (?:the )?(?:result|inference|service|serving))"
)
"""A lone ERROR line that says it is harmless ("... can be ignored", "safe to ignore"): some
libraries log expected conditions at ERROR level and say so."""


FALLBACK = regex.compile(
    rb"(?i:fall(?:ing)? ?back|(?:will |to )?(?:use|using) [^\n]{1,80}? instead"
    rb"|will (?:retry|try again)|retrying|skipp(?:ing|ed)\b|ignor(?:ing|ed)\b|disabl(?:ing|ed)\b)"
)
"""A failure the program recovers from by itself, saying so on the same line ("Failed to
import X, falling back to Y", "... failed, using the default instead", "retrying"): a notice,
not an error, when nothing but its wording says it failed."""


_FALLBACK_WORDS = (b"fall", b"instead", b"retr", b"try again", b"skipp", b"ignor", b"disabl")
"""Words every ``FALLBACK`` phrase holds (lower case): a line with none is searched no more."""
_IGNORE_WORDS = (b"ignore", b"harmless", b"not affect")
"""Words every ``IGNORABLE`` phrase holds (lower case)."""


def _holds(low: bytes, words: tuple[bytes, ...]) -> bool:
    """``low`` holds one of ``words`` (a loop: cheaper than ``any`` over a generator)."""
    for word in words:
        if word in low:
            return True
    return False


def ignorable(msg: bytes) -> bool:
    """The line says itself it is harmless (``IGNORABLE``)."""
    return may_ignore(msg) and IGNORABLE.search(msg, 0, 2000) is not None


def harmless(msg: bytes) -> bool:
    """The line says it can be ignored, or that the program goes on another way. The first
    2000 bytes are lowered once for both sets of words."""
    low = msg[:2000].lower()
    if _holds(low, _IGNORE_WORDS) and IGNORABLE.search(msg, 0, 2000) is not None:
        return True
    return _holds(low, _FALLBACK_WORDS) and FALLBACK.search(msg, 0, 2000) is not None


EXIT_NOISE = regex.compile(
    rb"TBE Subprocess\[\w{1,40}\] raise error\[[^\]\n]{0,200}\], main process disappeared!"
)
"""ERROR lines a process prints because another ended, not a failure of its own: CANN's TBE
compiler workers report their parent's exit at every shutdown, dozens of times, right after
vLLM's "Terminating local vLLM worker processes" (vllm-ascend #19; a crash that ended the
parent is reported by the parent's own lines)."""


def may_ignore(msg: bytes) -> bool:
    """False when ``IGNORABLE`` cannot match ``msg``: its first 2000 bytes hold none of the
    words every one of its phrases has (case-insensitive, ASCII, as the pattern). The phrase
    search tries a dozen case-folded branches at every byte; most ERROR lines have none."""
    return _holds(msg[:2000].lower(), _IGNORE_WORDS)


def may_fail(msg: bytes) -> bool:
    """False when ``FAILED_CALL`` cannot match ``msg``: it holds none of the words each of its
    forms has (the pattern tries them after every one of its first 400 bytes)."""
    return (
        b"function error: " in msg
        or b"rror code" in msg
        or b"rrorcode" in msg
        or (b"errno[" in msg)
    )


def may_be_fatal(msg: bytes) -> bool:
    """False when ``FATAL`` cannot match ``msg``. Each of its forms starts the line with a
    literal (``_FATAL_STARTS``; ``what(): `` after blanks too), holds ``Killed``, or ends the
    line, before trailing blanks, with a signal's name or `` (core dumped)`` (``_FATAL_ENDS``):
    its forms that may come after other text are tried at every one of 120 bytes, and ran for
    every candidate line not an exception (issue 18)."""
    return (
        msg.startswith(_FATAL_STARTS)
        or b"Killed" in msg
        or msg.rstrip().endswith(_FATAL_ENDS)
        or (msg[:1].isspace() and msg.lstrip().startswith(b"what(): "))
    )


_FATAL_STARTS = (
    b"terminate called",
    b"what(): ",
    b"Fatal Python error",
    b"Fatal glibc error",
    b"Segmentation fault",
    b"*** ",
    b"panic: ",
    b"thread '",
    b"fatal error: ",
    b"double free or corruption",
    b"free(): invalid",
    b"malloc(): ",
    b"munmap_chunk(): invalid",
    b"corrupted size vs. prev_size",
    b"corrupted double-linked list",
)
"""The literals ``FATAL``'s forms anchored at the line's start begin with."""
_FATAL_ENDS = (
    b"Floating point exception",
    b"Bus error",
    b"Illegal instruction",
    b"Aborted",
    b" (core dumped)",
)
"""What a line ``FATAL`` reads as a shell's signal report ends with (before blanks)."""


def may_state_error(msg: bytes) -> bool:
    """False when ``STATED_ERROR`` cannot match ``msg``: it holds none of the literals one of
    its forms holds (a form starting ``E`` is a CANN code at the line's start). Its forms
    that may come after other text try a score of verbs at each of 200 bytes: 4 us a line
    that has none, most lines (issue 18)."""
    return (
        b"ailed to " in msg
        or b"FAILED to " in msg
        or b" failed" in msg
        or b"error: " in msg
        or b"undefined reference to `" in msg
        or b"[ERROR] " in msg
        or b"[FATAL] " in msg
        or b"[CRITICAL] " in msg
        or msg[:1] == b"E"
        or b"Reason: " in msg
        or b"] Error " in msg
        or b"has no attribute '" in msg
    )


STATED_ERROR = regex.compile(
    # "Failed to import torch_npu.", containerd's "failed to register layer: ...", CANN's
    # "FAILED to ..."
    rb"(?:[Ff]ailed|FAILED) to [a-z]\w{1,40}\b"
    # a native call reporting its own failure: "Aicore kernel execute failed, device_id=2",
    # "GELib::InnerInitialize failed.", "OpCompileProcessor init failed!"
    rb"|[^\n]{0,200}?\b(?:execute|execution|init|initiali[sz]e|initiali[sz]ation|load|launch"
    rb"|open|register|create|allocate|alloc|malloc|connect|bind|build|compile|parse) failed"
    rb"(?:[,.!:]|\s|$)"
    # a compiler's or linker's diagnostic: "kernel_macros.h:24:10: fatal error: 'cstdint' file
    # not found", "foo.cpp:(.text+0x1c): undefined reference to `aclrtGetVersion'"
    rb"|[\w./+-]{1,200}:\d{1,7}(?::\d{1,7})?: (?:fatal )?error: \S"
    rb"|(?:[^\n]{0,200}?: )?undefined reference to `"
    # a level tag inside the text of an unleveled line (a script's "..[ERROR] the socversion")
    rb"|[^\n]{0,40}?\[(?:ERROR|FATAL|CRITICAL)\] \S"
    # a CANN error code that starts a sentence without its colon ("E19999 The opp version of")
    rb"|E[0-9A-Z]\d{4} [A-Z][a-z]"
    # CANN's error-message texts without their code (hicann/runtime 681ef76
    # src/dfx/error_manager/error_code.json): "%s failed. Reason: %s.", "The argument is
    # invalid. Reason: %s" (printed "invalid.Reason:" too), "%s is not supported. Reason:",
    # "Getting socket times out. Reason:", "Transport init error. Reason:"
    rb"|[^\n]{0,300}?\b(?:failed|invalid|not supported|times out|error)\. ?Reason: \S"
    # GNU make's report of a failed recipe ("gmake[3]: *** [CMakeFiles/x.dir/y.o] Error 1")
    rb"|g?make(?:\[\d{1,4}\])?: \*\*\* \[[^\]\n]{1,300}\] Error \d"
    # an AttributeError's text printed without its name ("module 'torch_npu' has no attribute
    # '_npu_flash_attention'", "'NoneType' object has no attribute 'x'")
    rb"|(?:module|type object|'[\w.]{1,80}' object) '?[\w.]{0,80}'? ?has no attribute '"
)
"""A line with no logging header that states a failure in one of the forms programs print
one: an error whatever its header says (none), when no rule knows it."""
TOOL_ERROR = regex.compile(rb"\s{1,24}(?:ERROR: \S|CMake Error at \S)")
"""A build tool's error as a nested build indents it: pip's ``  ERROR: Failed building wheel
for vllm_ascend`` (pip indents the output of the build it runs), CMake's ``CMake Error at
CMakeLists.txt:14 (project):`` inside pip's or setup.py's output. Indented, so no other form
reads it; never inside a traceback."""
CONTINUED_ERROR = regex.compile(
    rb"(?!(?:raise|return|assert|await|yield|self|super|def|if|elif|else|for|while|with|import"
    rb"|from|File|try|except|finally|lambda|print)\b)"
    rb"(?!\S{0,120}\()(?![\w.\[\]'\"]{1,120} ?[-+*/]?= )"
    rb"(?:[A-Z][a-z]{1,40}[ ,:.;!]|\[[A-Za-z]|[A-Z]\w{1,60}::\w"
    rb"|[^\n]{0,400}?(?:failed|rror|\[FUNC:))"
)
"""The text of an error on an indented ERROR line: a sentence (``The argument is invalid.``,
``Possible Cause: ...``), a bracketed CANN tag, a C++ name, or a line that says ``failed`` or
``error``; not a line of Python source that a logged traceback quotes (``super().__init__(``,
``raise RuntimeError(...)``, ``x = f(y)``)."""


__all__ = [
    "CONTINUED_ERROR",
    "EXIT_NOISE",
    "FALLBACK",
    "IGNORABLE",
    "STATED_ERROR",
    "TOOL_ERROR",
    "harmless",
    "ignorable",
    "may_be_fatal",
    "may_fail",
    "may_ignore",
    "may_state_error",
]
