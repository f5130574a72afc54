"""The configuration reference (docs/configuration.md), generated from the config model.

Everything comes from ``core/config.py`` itself: the dataclass tree under ``Config`` gives the
tables and keys, the defaults are the dataclasses' own, and the meaning of each key is the
string literal written under its field (read from the source with ``ast``, since Python keeps
no attribute docstrings at run time). Nothing here names a section, so a section added to
``Config`` appears in the reference the next time it is generated.

Regenerate with ``scripts/gen_config_reference``; ``tests/unit/test_config_reference.py``
fails when the committed file differs from what this module writes.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from ascend_doctor.core import config as config_module
from ascend_doctor.core.config import Config

UNDOCUMENTED = "(undocumented)"
"""What a field without a docstring shows; the test fails on it."""


@dataclass(frozen=True)
class Key:
    """One documented key of a table."""

    name: str
    """The key as written in TOML."""
    type: str
    """The TOML type it takes."""
    default: str
    """Its default, written as TOML."""
    meaning: str
    """The field's docstring, plus any constraint the loader enforces."""


@dataclass(frozen=True)
class Table:
    """One TOML table (a dataclass of the config tree)."""

    header: str
    """``[server]``, ``[collectors.npu_smi]``, ``[[alerts.sinks]]``..."""
    doc: str
    """The dataclass's docstring."""
    keys: tuple[Key, ...]
    """Its scalar keys (nested tables are listed as their own ``Table``)."""


def field_docs(cls: type[Any]) -> dict[str, str]:
    """Field name -> the string literal right after the field in ``cls``'s source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.ClassDef):
        return {}
    docs: dict[str, str] = {}
    body = node.body
    for stmt, after in zip(body, [*body[1:], None], strict=True):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def tables(root: type[Any] = Config) -> list[Table]:
    """Every table of the config tree, depth first, in declaration order."""
    return list(_walk(root, ""))


def _walk(cls: type[Any], prefix: str, array: bool = False) -> Iterator[Table]:
    hints = get_type_hints(cls)
    docs = field_docs(cls)
    keys: list[Key] = []
    nested: list[tuple[type[Any], str, bool]] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        dotted = f"{prefix}{f.name}"
        if _is_dataclass_type(hint):
            nested.append((hint, dotted, False))
            continue
        item = _container_item(hint)
        if item is not None:  # tuple[Section, ...] or dict[str, Section]: tables of their own
            kind, sub = item
            nested.append((sub, dotted if kind == "array" else f"{dotted}.<name>", kind == "array"))
            continue
        meaning = docs.get(f.name, UNDOCUMENTED)
        keys.append(Key(f.name, _type_name(hint), _default(f), _constraints(dotted, meaning)))
    if prefix:
        name = prefix.rstrip(".")
        header = f"[[{name}]]" if array else f"[{name}]"
        yield Table(header, inspect.cleandoc(cls.__doc__ or ""), tuple(keys))
    elif keys:
        yield Table("(top level)", inspect.cleandoc(cls.__doc__ or ""), tuple(keys))
    for sub, dotted, is_array in nested:
        yield from _walk(sub, dotted + ".", is_array)


def _is_dataclass_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _container_item(hint: Any) -> tuple[str, type[Any]] | None:
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple and args and _is_dataclass_type(args[0]):
        return "array", args[0]
    if origin is dict and len(args) == 2 and _is_dataclass_type(args[1]):
        return "map", args[1]
    return None


def _type_name(hint: Any) -> str:
    if hint is bool:
        return "boolean"
    if hint is int:
        return "integer"
    if hint is float:
        return "number"
    if hint is str:
        return "string"
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(toml_value(a) for a in args)
    if origin is tuple:
        return f"list of {_type_name(args[0])}s" if args else "list"
    if origin is dict and len(args) == 2:
        return f"table of {_type_name(args[1])}s"
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "nothing"
    return getattr(hint, "__name__", str(hint))


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not MISSING:
        return toml_value(f.default)
    if f.default_factory is not MISSING:
        return toml_value(f.default_factory())
    return "(required)"


def toml_value(value: Any) -> str:
    """A default written the way it would be written in the TOML file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items())
        return "{" + inner + "}"
    if value is None:
        return "(unset)"
    return str(value)


def _constraints(dotted: str, meaning: str) -> str:
    extra = []
    choices = getattr(config_module, "_CHOICES", {}).get(dotted)
    if choices:
        extra.append("One of: " + ", ".join(f"`{c}`" for c in choices) + ".")
    if dotted in getattr(config_module, "_POSITIVE", set()):
        extra.append("Must be greater than 0.")
    return " ".join([meaning, *extra])


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(root: type[Any] = Config) -> str:
    """The whole of docs/configuration.md."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gen_config_reference from core/config.py; do not edit. -->",
        "",
        "One TOML file, passed with `--config` (for a service: `/etc/ascend-doctor/config.toml`).",
        "Every key has a default, so an empty file (or no file) is a valid configuration. An",
        "unknown key, a value of the wrong type or out of range stops start-up with the file, the",
        "line, the key and what was expected. Durations are in seconds unless the key says",
        "otherwise. An example file is `docs/ascend-doctor.example.toml`.",
        "",
    ]
    all_tables = tables(root)
    out.append("Tables: " + ", ".join(f"`{t.header}`" for t in all_tables) + ".")
    out.append("")
    for table in all_tables:
        out.append(f"## `{table.header}`")
        out.append("")
        if table.doc:
            out.append(table.doc)
            out.append("")
        if not table.keys:
            out.append("No keys of its own; see the tables below it.")
            out.append("")
            continue
        out.append("| key | type | default | meaning |")
        out.append("|---|---|---|---|")
        for k in table.keys:
            out.append(f"| `{k.name}` | {k.type} | `{_cell(k.default)}` | {_cell(k.meaning)} |")
        out.append("")
    return "\n".join(out)


def reference_path() -> Path:
    """Where the reference lives in a source checkout."""
    return Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def main(argv: list[str] | None = None) -> int:
    """Write the reference to the path given (``-`` for stdout; default: docs/configuration.md)."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    target = args[0] if args else str(reference_path())
    if target == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = ["Key", "Table", "field_docs", "main", "reference_path", "render", "tables", "toml_value"]
