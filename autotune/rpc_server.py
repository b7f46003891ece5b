"""`tir rpc serve`: measure tuning candidates for other machines' tuners.

    tir rpc serve --device pocl --port 9190 --token SECRET     # on the device
    tir tune model.onnx --device pocl --rpc board:9190 --token SECRET   # on the build machine

Binds 127.0.0.1 unless --host says otherwise. Every request must carry the shared token
(--token or TIR_RPC_TOKEN; without either a random one is made and printed); a request with
a wrong token is logged and refused. Requests over the upload cap are refused without being
read; malformed ones get an error reply; the server keeps serving. Candidates run in a child
process (autotune/rpc_exec.py) one at a time, with a time-out. Protocol: autotune/rpc.py.
"""

from __future__ import annotations

import argparse
import hmac
import logging
import math
import os
import re
import secrets
import socket
import socketserver
import sys
import threading
from typing import Any

import numpy as np

from autotune.rpc import (
    DTYPES,
    ProtocolError,
    RPCError,
    TooLarge,
    decode_array,
    recv_header,
    recv_payloads,
    send_message,
)
from tensorir.errors import TirError

log = logging.getLogger("tir.rpc")
DEFAULT_PORT = 9190
DEFAULT_MAX_UPLOAD_MB = 256
IDLE_TIMEOUT_S = 60.0  # a client that stops sending mid-request is dropped
MAX_CONNECTIONS = 32  # more at once are closed at once (idle connections cannot pile up threads)
SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")


class Server(socketserver.ThreadingTCPServer):
    """The measurement server: device info, token, limits and the measuring child."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], token: str, device: str, max_upload: int, run_timeout_s: float
    ):
        from autotune.cli_tune import tuning_device
        from autotune.device_keys import cpu_key
        from autotune.records import local_gpu_name
        from autotune.rpc_exec import ChildRunner
        from tensorir.devices import get_tuning_device
        from tensorir.target import get_target, host_target

        self.token, self.max_upload, self.run_timeout_s = token, max_upload, run_timeout_s
        name = get_tuning_device(device).target  # the server runs on the device itself
        target = get_target(name)
        self.kind = "opencl" if target.kind == "opencl" else "library"
        self.info = {
            "device": device,
            "target": name,
            "device_key": tuning_device(name),
            "device_name": local_gpu_name(target),
            "cpu_key": cpu_key(host_target()),
        }
        self.child = ChildRunner(target.profile or "opencl")
        self.measured = 0  # candidates measured since the start (reported by "info")
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("closed a connection from %s: %d already open", client_address[0], MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def server_close(self) -> None:
        super().server_close()
        self.child.close()


class Handler(socketserver.BaseRequestHandler):
    """One request per connection: header, token, size check, payloads, reply."""

    server: Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(IDLE_TIMEOUT_S)
        who = f"{self.client_address[0]}:{self.client_address[1]}"
        try:
            header = recv_header(sock)
            if not _token_ok(header.get("token"), self.server.token):
                log.warning("refused a request from %s: wrong or missing token", who)
                return self._error(sock, "wrong or missing token", refused=True, drain=True)
            payloads = recv_payloads(sock, header, self.server.max_upload)
            reply, data = self._dispatch(header, payloads)
        except TooLarge as e:
            log.warning("refused a request from %s: %s", who, e)
            return self._error(sock, str(e), drain=True)
        except (ProtocolError, TimeoutError) as e:
            log.warning("bad request from %s: %s", who, e)
            return self._error(sock, f"bad request: {e}", drain=True)
        except (BadRequest, RPCError) as e:
            log.info("request from %s failed: %s", who, e)
            return self._error(sock, str(e))
        except OSError as e:
            log.warning("connection from %s lost: %s", who, e)
            return None
        send_message(sock, dict(reply, ok=True), data)
        return None

    def _dispatch(self, header: dict, payloads: list[bytes]) -> tuple[dict, list[bytes]]:
        from autotune.rpc import encode_array

        op = header.get("op")
        if op == "info":
            return dict(self.server.info, measured=self.server.measured), []
        if op != "run":
            raise BadRequest(f"unknown op {op!r}")
        job = parse_job(header, payloads, self.server)
        timeout = min(float(job.pop("timeout_s")), self.server.run_timeout_s)
        times, outs = self.server.child.run(job, timeout)
        self.server.measured += 1
        return {"times_s": times}, [encode_array(o) for o in outs]

    def _error(self, sock: socket.socket, message: str, refused: bool = False, drain: bool = False) -> None:
        try:
            send_message(sock, {"ok": False, "error": message, "refused": refused})
            if drain:  # unread bytes would turn our close into a reset that loses the reply
                sock.shutdown(socket.SHUT_WR)
                _drain(sock)
        except OSError:
            pass


class BadRequest(Exception):
    """A well-framed request that asks for something invalid."""


def _token_ok(got: Any, want: str) -> bool:
    return isinstance(got, str) and hmac.compare_digest(got.encode(), want.encode())


def _drain(sock: socket.socket, limit: int = 16 << 20, seconds: float = 2.0) -> None:
    """Read and drop what the client still sends, for at most `seconds` and `limit` bytes."""
    sock.settimeout(seconds)
    got = 0
    while got < limit:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return
        got += len(chunk)


# ---- request validation -------------------------------------------------------------------
def parse_job(header: dict, payloads: list[bytes], server: Server) -> dict:
    """A run request as the child's job: arrays decoded or allocated, settings in range."""
    kind = header.get("kind")
    if kind != server.kind:
        raise BadRequest(f"this server runs {server.kind} candidates ({server.info['target']}), not {kind!r}")
    job: dict[str, Any] = {"kind": kind}
    rest = list(payloads)
    if kind == "opencl":
        from tensorir.plan import GpuKernel

        try:
            job["kernel"] = GpuKernel.from_dict(header["kernel"])
        except (KeyError, TypeError, ValueError) as e:
            raise BadRequest(f"bad kernel description: {type(e).__name__}: {e}") from None
    else:
        symbol = header.get("symbol")
        if not isinstance(symbol, str) or not SYMBOL.fullmatch(symbol) or not rest:
            raise BadRequest("a library request needs a kernel symbol and the library as its first payload")
        job["symbol"], job["library"] = symbol, rest.pop(0)
    job["arrays"], job["outputs"] = _arrays(header.get("args"), rest, 4 * server.max_upload)
    job["repeat"] = _int(header, "repeat", 1, 1000, 5)
    job["warmup"] = _int(header, "warmup", 0, 100, 1)
    job["number"] = _int(header, "number", 0, 100_000, 0)
    job["threads"] = _int(header, "threads", 0, 4096, 0)
    job["min_repeat_s"] = _float(header, "min_repeat_s", 0.0, 1.0, 0.02)
    job["cold"] = header.get("cold") is True
    job["activations"] = _indices(header, "activations", len(job["arrays"]))
    job["timeout_s"] = _float(header, "timeout_s", 1.0, 3600.0, server.run_timeout_s)
    return job


def _arrays(args: Any, payloads: list[bytes], alloc_limit: int) -> tuple[list[np.ndarray], list[int]]:
    """Inputs from the payloads (in order), outputs and scratch allocated here."""
    if not isinstance(args, list) or len(args) > 256:
        raise BadRequest("'args' must be a list of at most 256 argument descriptions")
    if sum(isinstance(a, dict) and a.get("role") == "in" for a in args) != len(payloads):
        raise BadRequest("the number of input arrays differs from the number of payloads")
    arrays, outputs, allocated, it = [], [], 0, iter(payloads)
    for k, a in enumerate(args):
        role = a.get("role") if isinstance(a, dict) else None
        if role == "in":
            try:
                arrays.append(decode_array(next(it)))
            except ProtocolError as e:
                raise BadRequest(f"argument {k}: {e}") from None
            continue
        if role not in ("out", "scratch"):
            raise BadRequest(f"argument {k}: role must be in, out or scratch")
        shape, dtype = a.get("shape"), a.get("dtype")
        if not isinstance(shape, list) or len(shape) > 8 or not all(type(d) is int and d >= 0 for d in shape):
            raise BadRequest(f"argument {k}: bad shape {shape!r}")
        if dtype not in DTYPES:
            raise BadRequest(f"argument {k}: dtype {dtype!r} is not accepted")
        allocated += math.prod(shape) * np.dtype(dtype).itemsize
        if allocated > alloc_limit:
            raise BadRequest(f"outputs and scratch over the allocation limit of {alloc_limit} bytes")
        arrays.append(np.zeros(shape, dtype))
        if role == "out":
            outputs.append(k)
    return arrays, outputs


def _indices(header: dict, key: str, n: int) -> list[int]:
    v = header.get(key, [])
    if not isinstance(v, list) or len(v) > n or not all(type(k) is int and 0 <= k < n for k in v):
        raise BadRequest(f"{key!r} must be a list of argument indices below {n}")
    return v


def _int(header: dict, key: str, lo: int, hi: int, default: int) -> int:
    v = header.get(key, default)
    if v is None:
        return default
    if type(v) is not int or not lo <= v <= hi:
        raise BadRequest(f"{key!r} must be an integer in [{lo}, {hi}]")
    return v


def _float(header: dict, key: str, lo: float, hi: float, default: float) -> float:
    v = header.get(key, default)
    if type(v) not in (int, float) or not lo <= v <= hi:
        raise BadRequest(f"{key!r} must be a number in [{lo}, {hi}]")
    return float(v)


# ---- the command --------------------------------------------------------------------------
def add_rpc_parser(sub: argparse._SubParsersAction) -> None:
    from tensorir.devices import tuning_device_names

    p = sub.add_parser("rpc", help="measurement server for remote tuning (tir rpc serve)")
    rsub = p.add_subparsers(dest="rpc_command", required=True)
    s = rsub.add_parser("serve", help="measure candidates sent by `tir tune --rpc` on this device")
    s.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    s.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free)"
    )
    s.add_argument("--token", help="shared secret (default: $TIR_RPC_TOKEN, else a random one is printed)")
    known = ", ".join(tuning_device_names())
    s.add_argument("--device", default="host", help=f"what to measure on, here ({known})")
    s.add_argument("--max-upload-mb", type=float, default=DEFAULT_MAX_UPLOAD_MB, help="request size cap")
    s.add_argument("--run-timeout", type=float, default=60.0, help="seconds one candidate may run")
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from tensorir.devices import get_tuning_device

    get_tuning_device(args.device)  # an unknown name fails here, before anything starts
    token = args.token or os.environ.get("TIR_RPC_TOKEN") or ""
    if not token:
        token = secrets.token_urlsafe(16)
        print(f"tir rpc: no --token or TIR_RPC_TOKEN given; this server's token is {token}", flush=True)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="tir rpc: %(message)s")
    max_upload = int(args.max_upload_mb * (1 << 20))
    try:
        server = Server((args.host, args.port), token, args.device, max_upload, args.run_timeout)
    except OSError as e:
        raise TirError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    host, port = server.server_address[:2]
    print(f"tir rpc: serving {server.info['device_key']} on {host}:{port}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
