"""The wire between the judge (trusted) and the grading worker (learner code, sandboxed).

A message is a JSON header and, optionally, tensors in the ``safetensors`` format, length-prefixed::

    <u32 header bytes> <u64 tensor bytes> <JSON header> <safetensors blob>

Neither part can carry code: the judge parses what a worker sends with ``json`` and ``safetensors``, never
with ``pickle`` (which would run whatever a hostile worker packed into it). Sizes are bounded before
anything is read, and every header is checked against the shape the judge expects.

Requests (judge -> worker): ``{"id": n, "probe": name, "args": {...}, "needs": [names]}``, plus input tensors
(``needs``: the learner names the asking check may read, or null).
Answers (worker -> judge): ``{"id": n, "ok": true, "values": {...}}`` plus output tensors, or
``{"id": n, "ok": false, "error": {"kind": ..., ...}}`` when the learner's code failed (see ``ERROR_KINDS``).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import torch

PREFIX = struct.Struct("<IQ")
MAX_HEADER_BYTES = 16 * 1024**2
MAX_MESSAGE_BYTES = 1024**3  # a full-profile batch of images, or a model's gradients, with room to spare
MAX_TEXT = 2000  # characters kept of any text a worker sends (messages, source lines)
MAX_INT_DIGITS = 18  # the longest integer a reply may hold (red team, session 33: a count of 10**400)
MAX_LEARNER_INT = 2**53  # the largest number a probe passes on from learner code (``grader.probing.learner_int``)
ERROR_KINDS = ("missing", "not_implemented", "assertion", "exception", "unsettled")


class ProtocolError(Exception):
    """A message that is not what the protocol allows: malformed, oversized, unsolicited or out of order."""


class InconsistentAnswer(ProtocolError):
    """Two answers of the learner's code to the same question disagree (``grader.judging.assert_consistent``).
    Unlike the rest of ``ProtocolError``, which zeroes the whole submission, it costs the check that asked: forged
    answers look like this, and so does honest code that is not repeatable, so the check scores zero, its worker
    is replaced, the submission is flagged for an instructor and the other checks still grade."""


def _safetensors():
    import safetensors.torch

    return safetensors.torch


def pack(header: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None) -> bytes:
    """Encode a message. Tensors travel as plain CPU tensors (copied, so views and subclasses never leave)."""
    head = json.dumps(header, allow_nan=True).encode()
    body = b""
    if tensors:
        plain = {
            str(k): torch.Tensor(v.detach().cpu()).contiguous().clone()
            if type(v) is not torch.Tensor
            else v.detach().cpu().contiguous().clone()
            for k, v in tensors.items()
        }
        body = _safetensors().save(plain)
    return PREFIX.pack(len(head), len(body)) + head + body


def unpack(data: bytes) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Decode a message, or raise ``ProtocolError`` saying what is wrong with it."""
    if len(data) < PREFIX.size:
        raise ProtocolError(f"a message of {len(data)} bytes is shorter than its length prefix")
    head_len, body_len = PREFIX.unpack_from(data)
    if head_len > MAX_HEADER_BYTES or PREFIX.size + head_len + body_len != len(data):
        raise ProtocolError("a message's length prefix does not match its size")
    try:
        header = json.loads(data[PREFIX.size : PREFIX.size + head_len], parse_int=_bounded_int)
    except HugeInt as exc:
        raise ProtocolError(str(exc)) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"a message header is not JSON ({exc})") from None
    except RecursionError:  # JSON nested deeper than the parser recurses: no probe sends that
        raise ProtocolError("a message header nests its JSON thousands of levels deep") from None
    if not isinstance(header, dict):
        raise ProtocolError("a message header is not a JSON object")
    tensors: dict[str, torch.Tensor] = {}
    if body_len:
        try:
            tensors = _safetensors().load(bytes(data[PREFIX.size + head_len :]))
        except Exception as exc:  # noqa: BLE001 - any parse failure is a malformed message
            raise ProtocolError(f"a message's tensors are not valid safetensors ({type(exc).__name__})") from None
    return header, tensors


class HugeInt(ValueError):
    """An integer no probe sends."""


def _bounded_int(text: str) -> int:
    """A JSON integer, at most ``MAX_INT_DIGITS`` digits: probes send counts, sizes and seeds, and check a learner's
    numbers against ``MAX_LEARNER_INT`` first (``grader.probing.learner_int``); a larger one reaches the judge only
    from a worker that tampered with its replies, and would overflow where the judge prints it or sizes a tensor."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        digits = len(text.lstrip("-"))
        raise HugeInt(f"a reply holds an integer of {digits} digits, where probes send at most {MAX_INT_DIGITS}")
    return int(text)


def clip(text: Any, limit: int = MAX_TEXT) -> str:
    """A worker's text, made printable and short: it ends up in reports."""
    text = "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Answer:
    """What a probe observed: JSON values and tensors, read through checked accessors."""

    probe: str
    values: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def _fail(self, what: str) -> ProtocolError:
        return ProtocolError(f"probe {self.probe} answered without a valid {what}")

    def tensor(self, name: str, *, shape: tuple[int, ...] | None = None, optional: bool = False) -> torch.Tensor:
        """Tensor ``name`` (a plain CPU tensor), checked to have ``shape`` when given."""
        if name not in self.tensors:
            if optional:
                return None  # type: ignore[return-value]
            raise self._fail(f"tensor {name!r}")
        value = self.tensors[name]
        if shape is not None and tuple(value.shape) != tuple(shape):
            raise self._fail(f"tensor {name!r} of shape {tuple(shape)} (got {tuple(value.shape)})")
        return value

    def value(self, name: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        """JSON value ``name`` of type ``kind`` (ints are accepted where floats are asked for)."""
        if name not in self.values:
            if optional:
                return None
            raise self._fail(f"value {name!r}")
        value = self.values[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self._fail(f"value {name!r} of type {'/'.join(k.__name__ for k in kinds)}")
        if isinstance(value, float) and not math.isfinite(value) and float in kinds:
            return value
        return value

    def ints(self, name: str) -> list[int]:
        """A list of ints."""
        value = self.value(name, list)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self._fail(f"list of ints {name!r}")
        return value

    def floats(self, name: str) -> list[float]:
        """A list of numbers."""
        value = self.value(name, list)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise self._fail(f"list of numbers {name!r}")
        return [float(v) for v in value]

    def text(self, name: str, *, optional: bool = False, limit: int = 10 * MAX_TEXT) -> str | None:
        """A string, clipped for reports."""
        value = self.value(name, (str, type(None)), optional=optional)
        return None if value is None else clip(value, limit)

    def counts(self, name: str) -> dict[str, int]:
        """A mapping of event names to counts (non-negative ints)."""
        value = self.value(name, dict)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values()):
            raise self._fail(f"mapping of counts {name!r}")
        return {clip(k, 200): v for k, v in value.items()}

    def strings(self, name: str) -> list[str]:
        """A list of strings, each clipped."""
        value = self.value(name, list)
        if not all(isinstance(v, str) for v in value):
            raise self._fail(f"list of strings {name!r}")
        return [clip(v) for v in value]


# ------------------------------------------------------------------------------------------- framing
# Frames are <u64 length><message>. The judge reads and writes its end without ever blocking: a worker that
# sends half a frame, claims a huge one, or stops reading cannot hang the judge past its deadline.
FRAME = struct.Struct("<Q")


class Deadline(Exception):
    """The deadline passed while a frame was on its way."""


def _wait(fd: int, write: bool, deadline: float | None, idle) -> None:
    import select
    import time

    while True:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise Deadline()
        step = 0.25 if timeout is None else min(0.25, timeout)
        r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], step)
        if r or w:
            return
        if idle is not None:
            idle()


def send_frame(fd: int, data: bytes, deadline: float | None = None, idle=None) -> None:
    """Write one frame; with a deadline, never blocks past it (``idle()`` runs while waiting)."""
    import os

    view = memoryview(FRAME.pack(len(data)) + data)
    while view:
        if deadline is not None:
            _wait(fd, True, deadline, idle)
        try:
            sent = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[sent:]


def _read_exact(fd: int, n: int, deadline: float | None, idle) -> bytes:
    import os

    chunks, left = [], n
    while left:
        if deadline is not None:
            _wait(fd, False, deadline, idle)
        try:
            chunk = os.read(fd, min(left, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            raise EOFError()
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(fd: int, deadline: float | None = None, idle=None, max_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """Read one frame (``EOFError`` if the other end closed, ``ProtocolError`` if it is too large)."""
    (length,) = FRAME.unpack(_read_exact(fd, FRAME.size, deadline, idle))
    if length > max_bytes:
        raise ProtocolError(f"a message of {length} bytes is over the {max_bytes}-byte limit")
    return _read_exact(fd, length, deadline, idle)


def readable(fd: int) -> bool:
    """True if the other end has sent something (or closed)."""
    import select

    return bool(select.select([fd], [], [], 0)[0])
