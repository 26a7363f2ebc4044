"""A build server for a fleet: builds candidates on a GPU host, next to its measuring servers.

    python -m tune_orchestrator.measure.build_server --tracker HOST:PORT --key h100-build
                                                     --host 10.0.0.5 [--port 9090]
                                                     [--port-end 9199] [--custom-addr ADDR]

One process serves one build at a time, as a TVM RPC server registered with the tracker under
`--key` (start one per core the host lends to builds). Before it serves it registers
BUILD_FUNCTION, which compiles a candidate sent by a run's RpcBuilder (its scheduled module as
TVM JSON and its target) with the build pool's own build function and returns the shared
library's bytes. The same trust as a measuring server: whoever reaches the tracker can run
code on the host (docs/gpu.md, "What a fleet trusts").
"""

from __future__ import annotations

import argparse
import socket
import tempfile
from pathlib import Path

BUILD_FUNCTION = "tune_orchestrator.build_candidate"
# How a build server's error begins where its temporary folder's disk is full, not the
# candidate at fault (RpcBuilder stops the run on it, as the build pool does on the host's).
DISK_FULL = "the temporary folder of build server"


def build_candidate(mod_json: str, target_json: str) -> bytearray:
    """The shared library of a scheduled module built for a target (both tvm.ir.save_json).
    Not tried where the temporary folder's disk has too little room: LLVM ends the process
    whose disk fills, which the run would read as the candidate's failure."""
    import tvm

    from ._worker import build
    from .build_pool import full_disk, short_of_room

    short = short_of_room(tempfile.gettempdir())
    if short is not None:
        _refuse_build(short)
    mod = tvm.ir.load_json(mod_json)
    target = tvm.ir.load_json(target_json)
    with tempfile.TemporaryDirectory(prefix="orchestrate-remote-build-") as folder:
        try:
            path, _ = build(mod, target, folder)
        except Exception as exc:
            said = full_disk(str(exc), folder)
            if said is not None:
                _refuse_build(said)
            raise
        return bytearray(Path(path).read_bytes())


def _refuse_build(said: str) -> None:
    """Raise the error that tells the run this server's disk is full, and why."""
    raise RuntimeError(
        f"{DISK_FULL} {socket.gethostname()}, {tempfile.gettempdir()}, is full: {said}"
    )


def register() -> None:
    """Run in the server's process before it serves (each session forks from it): the build
    function, and what builds import, loaded once."""
    import tvm

    from ._worker import warm_up

    warm_up()
    tvm.register_global_func(BUILD_FUNCTION, build_candidate, override=True)


def main(argv: list[str] | None = None) -> None:
    from tvm import rpc

    from .rpc import parse_tracker

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracker", required=True, help="the tracker's HOST:PORT")
    parser.add_argument("--key", required=True, help="the key runs name in [build] rpc_key")
    parser.add_argument(
        "--host", required=True, help="the address to serve on: a private one (docs/gpu.md)"
    )
    parser.add_argument("--port", type=int, default=9090, help="the first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="the last port to try")
    parser.add_argument(
        "--custom-addr", help="the address the tracker hands out for this server (SSH tunnels)"
    )
    args = parser.parse_args(argv)
    try:
        tracker = parse_tracker(args.tracker)
    except ValueError as exc:
        parser.error(str(exc))
    server = rpc.Server(
        args.host,
        args.port,
        args.port_end,
        tracker_addr=tracker,
        key=args.key,
        custom_addr=args.custom_addr,
        server_init_callback=register,
    )
    print(f"build server on {args.host}:{server.port}, key {args.key!r}", flush=True)
    server.proc.join()


if __name__ == "__main__":
    main()
