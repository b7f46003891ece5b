"""The measurement RPC protocol: framing, array encoding and the client calls.

    info = server_info("10.0.0.5:9190", token)            # {"device_key": ..., "target": ...}
    reply, outs = call("10.0.0.5:9190", token, {"op": "run", ...}, payloads, timeout_s=30)

One request per TCP connection, one reply. A message is

    b"TIR1" | header length (4 bytes, big-endian) | JSON header (UTF-8) | payloads

The header is a JSON object; its "sizes" lists the byte length of each raw payload that
follows. Arrays travel as .npy bytes and are read with `np.load(..., allow_pickle=False)`:
nothing received is ever unpickled. The client puts the shared token in the request header;
the server compares it in constant time before reading any payload, and refuses a request
whose header is over HEADER_MAX or whose payloads add up to more than its upload cap without
reading them. A reply is {"ok": true, ...} with payloads, or {"ok": false, "error": "..."}
("refused": true when the token was wrong).
"""

from __future__ import annotations

import io
import json
import socket
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import TirError

MAGIC = b"TIR1"
PROTOCOL = 1
HEADER_MAX = 4 << 20  # JSON header bytes (a kernel's OpenCL source is well below)
REPLY_MAX = 4 << 30  # what a client accepts back (the outputs)
# what an array may be: plain numeric dtypes only (no objects, no structured records)
DTYPES = frozenset(
    ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32")
) | {"float64"}


class ProtocolError(Exception):
    """A malformed message (bad magic, header, sizes or array)."""


class TooLarge(ProtocolError):
    """A message over the receiver's limit (its payloads were not read)."""


class RPCError(TirError):
    """The server answered with an error, or could not be reached."""


class Unreachable(RPCError):
    """The server could not be reached, or the connection broke before its reply."""


class RefusedError(RPCError):
    """The server refused the request: wrong or missing token."""


# ---- framing ------------------------------------------------------------------------------
def send_message(sock: socket.socket, header: dict, payloads: Sequence[bytes] = ()) -> None:
    """Send a header and its raw payloads (their sizes go into the header)."""
    data = json.dumps(dict(header, sizes=[len(p) for p in payloads])).encode()
    sock.sendall(MAGIC + struct.pack(">I", len(data)) + data)
    for p in payloads:
        sock.sendall(p)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_header(sock: socket.socket, header_max: int = HEADER_MAX) -> dict:
    """Read and check a message's header (not its payloads)."""
    magic = recv_exact(sock, 4)
    if magic != MAGIC:
        raise ProtocolError(f"not a tir rpc message (starts with {magic!r})")
    (n,) = struct.unpack(">I", recv_exact(sock, 4))
    if n > header_max:
        raise TooLarge(f"header of {n} bytes is over the limit of {header_max}")
    try:
        header = json.loads(recv_exact(sock, n).decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    sizes = header.get("sizes", [])
    if not isinstance(sizes, list) or not all(type(s) is int and s >= 0 for s in sizes):
        raise ProtocolError("header 'sizes' must be a list of non-negative integers")
    return header


def recv_payloads(sock: socket.socket, header: dict, limit: int) -> list[bytes]:
    """The payloads `header` announces; TooLarge (nothing read) when they exceed `limit`."""
    total = sum(header.get("sizes", []))
    if total > limit:
        raise TooLarge(f"upload of {total} bytes is over the limit of {limit}")
    return [recv_exact(sock, s) for s in header.get("sizes", [])]


# ---- arrays -------------------------------------------------------------------------------
def encode_array(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def decode_array(data: bytes) -> np.ndarray:
    """An .npy payload (never unpickled; plain numeric dtypes only)."""
    try:
        a = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as e:  # numpy raises ValueError, OSError, EOFError... on bad bytes
        raise ProtocolError(f"bad .npy payload: {type(e).__name__}: {e}") from None
    if not isinstance(a, np.ndarray) or a.dtype.name not in DTYPES:
        raise ProtocolError(f"array of dtype {getattr(a, 'dtype', type(a).__name__)} is not accepted")
    return np.ascontiguousarray(a)


# ---- client -------------------------------------------------------------------------------
def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TirError(f"--rpc {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def parse_servers(text: str) -> tuple[str, ...]:
    """'h1:9190,h2:9190' -> ('h1:9190', 'h2:9190') (each checked)."""
    servers = tuple(s.strip() for s in text.split(",") if s.strip())
    if not servers:
        raise TirError("--rpc: expected HOST:PORT[,HOST:PORT...]")
    for s in servers:
        parse_address(s)
    return servers


def call(
    address: str, token: str, header: dict, payloads: Sequence[bytes] = (), timeout_s: float = 30.0
) -> tuple[dict, list[bytes]]:
    """One request; the reply's header and payloads. RPCError when the server answers with an
    error (RefusedError: wrong token), Unreachable when it cannot be reached or the connection
    breaks, TimeoutError when no reply comes within timeout_s."""
    try:
        sock = socket.create_connection(parse_address(address), timeout=timeout_s)
    except OSError as e:
        raise Unreachable(f"rpc server {address}: cannot connect: {e.strerror or e}") from None
    with sock:
        try:
            send_message(sock, dict(header, token=token, protocol=PROTOCOL), payloads)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped reading (a refused request): its reply says why
        except TimeoutError:
            raise TimeoutError(f"rpc server {address}: upload timed out after {timeout_s:.0f} s") from None
        try:
            reply = recv_header(sock)
            data = recv_payloads(sock, reply, REPLY_MAX)
        except TimeoutError:
            raise TimeoutError(f"rpc server {address}: no reply within {timeout_s:.0f} s") from None
        except (OSError, ProtocolError) as e:
            raise Unreachable(f"rpc server {address}: connection lost: {e}") from None
    if reply.get("ok") is not True:
        kind = RefusedError if reply.get("refused") else RPCError
        raise kind(f"rpc server {address}: {reply.get('error', 'error without a message')}")
    return reply, data


def server_info(address: str, token: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """What the server measures on: device_key, target, cpu_key, device_name."""
    reply, _ = call(address, token, {"op": "info"}, timeout_s=timeout_s)
    return reply
