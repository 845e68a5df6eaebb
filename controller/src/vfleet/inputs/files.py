"""Reading what an operator hands vfleet: bytes checked before they are parsed, YAML and
JSON parsed strictly, and every key's line kept for the error message.

Every file an operator names is read through `read_bytes`. Refused here, each in one
line: anything but a regular file (a FIFO or /dev/zero would block or never end), a
missing, unreadable, oversized, binary or non-UTF-8 file; a key given twice (PyYAML
would keep the last silently, which turns a duplicated host into a missing one); YAML
whose aliases expand past MAX_VALUES values or nest past MAX_DEPTH levels (a "billion
laughs" file would otherwise hang every later step); NaN and Infinity in JSON.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from vfleet.errors import UserError

MAX_BYTES = 8 * 2**20  # far above any spec, inventory or plan vfleet writes
MAX_VALUES = 200_000  # values after alias expansion (a 1,024-node facts dir has ~60k)
MAX_DEPTH = 64

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Vaulted:
    """A `!vault` value: encrypted with Ansible Vault, decrypted only by Ansible."""

    ciphertext: str


@dataclass(frozen=True)
class Document:
    """Parsed data, where it came from, and the line of each key or list item."""

    data: Any
    source: str
    lines: Mapping[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int | None:
        """The line of the deepest part of `path` that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None


def read_bytes(path: Path, what: str, max_bytes: int = MAX_BYTES, tail: bool = False) -> bytes:
    """The bytes of one regular file, or a UserError naming it and what to do instead.

    The file is opened without blocking and checked before a byte is read, so a FIFO, a
    device such as /dev/zero, a socket or a directory is refused rather than waited on or
    read without end. More than `max_bytes` is refused, or with `tail` only the last
    `max_bytes` are kept (logs)."""
    fd = _open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            if not tail:
                raise UserError(
                    f"{what} {path} is {size / 2**20:.1f} MiB, more than the "
                    f"{max_bytes / 2**20:g} MiB vfleet reads: pass the right file"
                )
            os.lseek(fd, size - max_bytes, os.SEEK_SET)
        raw = _read_at_most(fd, max_bytes + 1)  # one byte more tells a file that grew
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        if not tail:
            raise UserError(
                f"{what} {path} grew past {max_bytes / 2**20:g} MiB while read: "
                "pass a file that is not being written"
            )
        raw = raw[-max_bytes:]
    return raw


def _open_regular(path: Path, what: str) -> int:
    """A descriptor on `path` opened without blocking, refused unless a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist: check the path") from None
    except PermissionError:
        raise UserError(f"cannot read {what} {path}: permission denied") from None
    except IsADirectoryError:
        raise UserError(f"{what} {path} is a directory: pass the file itself") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise UserError(f"{what} {path} is a directory: pass the file itself")
    raise UserError(
        f"{what} {path} is {_kind(mode)}, not a regular file: pass a file saved on disk"
    )


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 2**20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_text(path: Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of one regular file (see `read_bytes`), refused if binary."""
    raw = read_bytes(path, what, max_bytes)
    if b"\0" in raw:
        raise UserError(f"{what} {path} is a binary file, not text: pass the YAML or JSON file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} {path} is not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x}): "
            "save it as UTF-8"
        ) from None


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice and reads Ansible's `!vault` and `!unsafe`."""


def _mapping(loader: StrictLoader, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping says so
            break
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{key!r} appears twice (lines {first + 1} and {key_node.start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


def _scalar(loader: StrictLoader, node: Node) -> str:
    """The text of a tagged scalar; a tag on a list or a mapping is refused (as PyYAML's
    construct_scalar refuses it)."""
    if not isinstance(node, ScalarNode):
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"expected a scalar node, but found {getattr(node, 'id', type(node).__name__)}",
            node.start_mark,
        )
    return loader.construct_scalar(node)


def _vault(loader: StrictLoader, node: Node) -> Vaulted:
    return Vaulted(_scalar(loader, node))


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
StrictLoader.add_constructor("!vault", _vault)
StrictLoader.add_constructor("!unsafe", _scalar)


class _TooLarge(Exception):
    pass


def _key(loader: StrictLoader, node: Node) -> str | int | None:
    if not isinstance(node, ScalarNode):
        return None
    value = loader.construct_object(node)
    return value if isinstance(value, str | int) and not isinstance(value, bool) else str(value)


def _positions(loader: StrictLoader, root: Node) -> dict[Path_, int]:
    """The line of every key and list item, counting values as aliases expand them."""
    lines: dict[Path_, int] = {(): root.start_mark.line + 1}
    budget = MAX_VALUES
    stack: list[tuple[Node, Path_]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        budget -= 1
        if budget < 0 or len(path) > MAX_DEPTH:
            raise _TooLarge
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                key = _key(loader, key_node)
                child = (*path, key if key is not None else "?")
                lines.setdefault(child, key_node.start_mark.line + 1)
                stack.append((value_node, child))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                child = (*path, index)
                lines.setdefault(child, item.start_mark.line + 1)
                stack.append((item, child))
    return lines


def parse_yaml(text: str, source: str) -> Document:
    """One YAML document, strictly; `source` names it in errors."""
    loader = StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return Document(None, source)
        lines = _positions(loader, root)
        data = loader.construct_document(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{source}{where}: {problem}: fix the YAML") from None
    except (_TooLarge, RecursionError):
        raise UserError(
            f"{source}: expands to more than {MAX_VALUES:,} values or nests deeper than "
            f"{MAX_DEPTH} levels (YAML aliases?): write the values out"
        ) from None
    except ValueError as exc:  # an integer of more than 4,300 digits, a date like 2001-13-01
        reason = str(exc).splitlines()[0].split(";")[0]
        raise UserError(f"{source}: cannot read a value ({reason}): fix it or quote it") from None
    finally:
        loader.dispose()
    return Document(data, source, lines)


def load_yaml(path: Path, what: str) -> Document:
    """Read and parse one YAML file; `what` names it in errors ("cluster spec", ...)."""
    return parse_yaml(read_text(path, what), str(path))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # the rare case: find the key to name it
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"{key!r} appears twice")
            seen.add(key)
    return out


def parse_json(text: str, source: str) -> Document:
    """One JSON document: duplicate keys, NaN and Infinity refused."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source} line {exc.lineno}: not JSON ({exc.msg}): fix the file") from None
    except ValueError as exc:
        raise UserError(f"{source}: {exc}: fix the file") from None
    except RecursionError:
        raise UserError(f"{source}: nests too deep to be a vfleet document") from None
    return Document(data, source)


def load_json(path: Path, what: str) -> Document:
    """Read and parse one JSON file; `what` names it in errors ("plan", ...)."""
    return parse_json(read_text(path, what), str(path))
