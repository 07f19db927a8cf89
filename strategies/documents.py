"""Reading input documents: one place for every file execsim reads.

``read_text`` reads a file as UTF-8 (a BOM is accepted) with a size limit; ``parse_document``
parses YAML or JSON strictly: a key given twice in one mapping is an error (PyYAML and ``json``
silently keep the last one), and so is a non-finite number in JSON (``NaN``, ``Infinity``, which
are not JSON). ``load_document`` does both. The strategy file, pipeline file, model and cluster
YAML, Hugging Face ``config.json``, the GPU catalog, schedule CSVs and profile CSVs all come through
here, so they fail the same way with the same words.

>>> parse_document("parallel: {tp: 2, pp: 2, tp: 4}", "x.yaml")
Traceback (most recent call last):
...
strategies.errors.ConfigError: x.yaml: key 'parallel.tp' is given twice (line 1 column 12 and line 1 column 26); keep one
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, ClassVar

import yaml

from strategies.errors import ConfigError, brief, cut
from strategies.limits import MAX_CSV_BYTES, MAX_DOCUMENT_BYTES, MAX_TRACE_BYTES

__all__ = [
    "check_finite",
    "files_read",
    "forget_files_read",
    "load_document",
    "load_trace_json",
    "parse_document",
    "parse_scalar",
    "read_csv_text",
    "read_text",
]

#: Every file this process has read through this module (its real path), in reading order: the inputs
#: no output may replace (``simulator.outputs.files`` checks each output against them, before the work
#: and again when writing), including files found through folders (``calibrate``'s traces) and through
#: paths inside other inputs (a model file, a profile, a Hugging Face config). The CLI forgets them at
#: the start of each command (``forget_files_read``).
_FILES_READ: dict = {}


def files_read() -> tuple:
    """The real paths of the files read so far (see ``_FILES_READ``)."""
    return tuple(_FILES_READ)


def forget_files_read() -> None:
    """Start a new command: no file read yet."""
    _FILES_READ.clear()


def _note_read(path) -> None:
    try:
        _FILES_READ[os.path.realpath(path)] = None
    except (OSError, ValueError):
        pass


def read_text(path, what: str = "file", *, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The text of ``path``: must exist, be a file, be at most ``limit`` bytes and be UTF-8."""
    p = Path(path)
    name = brief(str(p), 120)
    try:
        if not p.exists():
            raise ConfigError(f"{what} {name} does not exist: check the path")
        if p.is_dir():
            raise ConfigError(f"{what} {name} is a directory, not a file: give the path of the file itself")
        # opened without blocking (a FIFO would wait for a writer for ever), then checked: only a
        # regular file is read (a FIFO, device or socket has no end to wait for)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as fh:
            _note_read(p)
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"{what} {name} is not a regular file (a FIFO, device or socket): give the path of "
                                  f"a file")
            if st.st_size > limit:
                raise ConfigError(f"{what} {name} is {st.st_size:,} bytes, over the limit of {limit:,} for this kind "
                                  f"of file; is it the right file?")
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {name} cannot be read ({exc.strerror or type(exc).__name__}); check the path "
                          f"and its permissions") from None
    if len(data) > limit:
        raise ConfigError(f"{what} {name} is over the limit of {limit:,} bytes for this kind of file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                          f"save it as UTF-8") from None
    if "\x00" in text:
        raise ConfigError(f"{what} {name} contains a NUL byte at offset {text.index(chr(0))}: it is not a text "
                          f"file")
    return text


def csv_rows(text: str, columns: tuple, what: str):
    """``(line number, row)`` for each data row of CSV ``text`` whose header must hold ``columns``:
    one error naming ``what`` for a missing column, a row with fewer cells than the header, or text
    that is not CSV."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"{what} lacks column(s) {', '.join(missing)}; the header must hold {','.join(columns)}")
        for row in reader:
            if any(row.get(c) is None for c in columns):
                raise ConfigError(f"{what} line {reader.line_num} has fewer cells than the header "
                                  f"({','.join(columns)}); fill every column")
            if row.get(None):   # DictReader's cells past the header: a decimal comma splits a number in two
                raise ConfigError(f"{what} line {reader.line_num} has more cells than the header "
                                  f"({','.join(columns)}): extra {brief(row[None][0], 40)}; write decimals with a "
                                  f"point (12.5, not 12,5) and quote a cell holding a comma")
            yield reader.line_num, row
    except csv.Error as exc:
        raise ConfigError(f"{what} is not valid CSV (line {reader.line_num}: {cut(str(exc), 80)})") from None


def read_csv_text(path, what: str) -> str:
    """``read_text`` with the CSV size limit."""
    return read_text(path, what, limit=MAX_CSV_BYTES)


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader (C parser when available) that rejects duplicate keys in a mapping and reads plain
    scalars by the YAML 1.2 core schema (see ``_YAML12_RESOLVERS``)."""

    yaml_implicit_resolvers: ClassVar[dict] = {}

    def construct_yaml_int(self, node):
        """YAML 1.2 integers: decimal, ``0o`` octal, ``0x`` hexadecimal. A decimal with a leading zero
        (``017``) is refused: YAML 1.1 readers take it as octal (15), YAML 1.2 ones as 17."""
        text = self.construct_scalar(node)
        body = text.lstrip("+-")
        if len(body) > 1 and body[0] == "0" and body[1].isdigit():
            raise yaml.constructor.ConstructorError(
                None, None, f"the number {cut(text, 40)} has a leading zero (YAML 1.1 reads it as octal, YAML 1.2 "
                f"as decimal): write it without the zero, or with 0o for octal", node.start_mark)
        sign = -1 if text.startswith("-") else 1
        if body[:2] in ("0o", "0x"):
            return sign * int(body[2:], 8 if body[1] == "o" else 16)
        return sign * int(body)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<: *base' merges; explicit keys may override merged ones
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except Exception:  # noqa: BLE001, S112 -- any unhashable key type
                    continue  # unhashable keys are reported by the base constructor
                m = key_node.start_mark
                where = f"line {m.line + 1} column {m.column + 1}"
                if key in seen:
                    raise _Duplicate(key, seen[key], where, node)
                seen[key] = where
        return super().construct_mapping(node, deep=deep)


#: Plain scalars are read by the YAML 1.2 core schema (yaml.org/spec/1.2.2 Section 10.3.2), not PyYAML's
#: YAML 1.1 rules, which read ``2:08`` as the integer 128 (base 60), ``1_28`` as 128 and ``yes`` /
#: ``on`` as true, but ``1e12`` (no decimal point) as text. Here ``1e12`` is the number 1e12, and
#: ``2:08``, ``1_28``, ``yes`` stay text, which the field checks then refuse, naming the field.
_YAML12_RESOLVERS = (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("tag:yaml.org,2002:float", (r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), "-+0123456789."),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", "<"),
)
for _tag, _rx, _first in _YAML12_RESOLVERS:
    _StrictLoader.add_implicit_resolver(_tag, re.compile(_rx), list(_first))
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


class _Duplicate(Exception):
    def __init__(self, key, first, second, node):
        super().__init__(key)
        self.key, self.first, self.second, self.node = key, first, second, node


def _yaml_path(node_root, target) -> str:
    """Dotted path from the document root to mapping node ``target`` (node identity)."""
    stack = [(node_root, "")]
    seen = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node is target:
            return path
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                label = k.value if isinstance(k, yaml.ScalarNode) else "?"
                stack.append((v, f"{path}.{label}" if path else str(label)))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, f"{path}[{i}]"))
    return ""


def _json_pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _JsonDuplicate(k)
        out[k] = v
    return out


class _JsonDuplicate(Exception):
    pass


def _json_constant(name):
    raise _JsonNonFinite(name)


class _JsonNonFinite(Exception):
    pass


def parse_document(text: str, where: str, *, json_format: bool = False) -> Any:
    """Parse YAML (or JSON when ``json_format``) strictly; errors start with ``where``."""
    if json_format:
        try:
            return json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)
        except _JsonDuplicate as exc:
            raise ConfigError(f"{where}: key {brief(exc.args[0])} is given twice in one object; keep one") from None
        except _JsonNonFinite as exc:
            raise ConfigError(f"{where}: {exc.args[0]} is not a JSON number (JSON has no NaN or infinity); give a "
                              f"finite number") from None
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{where} is not valid JSON: {cut(str(exc), 160)}") from None
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        try:
            return loader.construct_document(root)
        except _Duplicate as exc:
            path = _yaml_path(root, exc.node)
            name = f"{path}.{exc.key}" if path else str(exc.key)
            raise ConfigError(f"{where}: key {brief(name)} is given twice ({exc.first} and {exc.second}); "
                              f"keep one") from None
    except ConfigError:
        raise
    except yaml.YAMLError as exc:
        msg = " ".join(m.strip() for m in str(exc).strip().splitlines()[:4])
        raise ConfigError(f"{where} is not valid YAML: {cut(msg, 200)}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. an int with too many digits
        raise ConfigError(f"{where}: a value cannot be read ({type(exc).__name__}: {cut(str(exc), 100)}); "
                          f"check the file") from None
    finally:
        loader.dispose()


def load_trace_json(path, what: str = "trace") -> Any:
    """A machine-written JSON trace (PyTorch profiler / Kineto), plain or gzip-compressed (``.gz``),
    at most ``MAX_TRACE_BYTES`` once decompressed. Parsed with the standard JSON reader: a trace is
    not hand-written, so duplicate keys are not looked for, and NaN is accepted as the profiler writes it."""
    import gzip
    import zlib
    p = Path(path)
    name = brief(str(p), 120)
    if not str(p).lower().endswith(".gz"):
        data = read_text(p, what, limit=MAX_TRACE_BYTES)
    else:
        try:
            if not p.is_file():
                raise ConfigError(f"{what} {name} does not exist or is not a file: check the path")
            _note_read(p)
            with gzip.open(p, "rb") as fh:
                raw = fh.read(MAX_TRACE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise ConfigError(f"{what} {name} cannot be read as gzip ({cut(str(exc), 80)}); check the file") from None
        if len(raw) > MAX_TRACE_BYTES:
            raise ConfigError(f"{what} {name} is over the limit of {MAX_TRACE_BYTES:,} bytes decompressed; trace "
                              f"fewer steps")
        try:
            data = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{what} {name} is not UTF-8 JSON (offset {exc.start})") from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{what} {name} is not valid JSON: {cut(str(exc), 160)}") from None


def load_document(path, what: str = "file") -> Any:
    """Read and parse ``path`` (JSON when its suffix is ``.json``, else YAML)."""
    text = read_text(path, what)
    return parse_document(text, f"{what} {brief(str(path), 120)}", json_format=str(path).lower().endswith(".json"))


def parse_scalar(text: str) -> Any:
    """A ``--set`` value parsed as YAML (``16`` -> 16, ``true`` -> True, ``1f1b`` -> '1f1b');
    text that is not valid YAML stays a string."""
    try:
        return parse_document(text, "--set value")
    except ConfigError as exc:
        if "given twice" in str(exc):
            raise
        return text


def check_finite(value: Any, what: str, prefix: str = "") -> None:
    """Raise on the first non-finite float anywhere in a parsed document, naming its dotted path
    (``what``: the document; ``prefix``: the path of ``value`` in it). Each container is visited
    once, so an alias bomb costs its size in the file, not its expanded size."""
    stack, seen = [(value, prefix)], set()
    while stack:
        v, path = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                raise ConfigError(f"{what}: {path or 'value'} = {v!r} must be a finite number")
        elif isinstance(v, (dict, list)):
            if id(v) in seen:
                continue
            seen.add(id(v))
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                key = brief(k, 40) if not isinstance(k, str) else k[:40]
                stack.append((x, (f"{path}.{key}" if path else key) if isinstance(v, dict) else f"{path}[{k}]"))
