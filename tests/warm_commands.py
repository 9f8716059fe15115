"""Command lines started warm, for tests that run a script of many of them (the distillation
pipeline): one server process imports TensorFlow and the commands once; each `kt-*` command the
script starts is a small client (a shim on PATH) that hands its arguments, working directory,
environment and standard streams to the server, which forks a child to run it and answers with
its exit status. A child is a process of its own as a command started cold is (its own
TensorFlow runtime: the server never runs an op), minus the seconds of imports.

    with warm_commands(directory) as env:   # env: os.environ with the shims first on PATH
        subprocess.run(["bash", "script.sh"], env=env)

Not a test module (no tests); `python warm_commands.py serve SOCKET` is the server,
`python warm_commands.py run SOCKET COMMAND ARGS...` a client.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
# The console scripts setup.py declares, by the launcher command each runs.
COMMANDS = {"kt-train": "train", "kt-evaluate": "evaluate", "kt-export": "export",
            "kt-translate": "translate", "kt-translate-corpus": "translate_corpus",
            "kt-average-checkpoints": "average_checkpoints", "kt-prepare": "prepare"}
STATUS = struct.Struct("!i")


def serve(path: str) -> None:
    """Imports the commands, then runs each request in a forked child, one at a time."""
    sys.path.insert(0, str(ROOT))
    from trainers import launch

    launch.import_tensorflow_quietly([])
    for command in set(COMMANDS.values()):
        __import__(f"trainers.{command}")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    while True:
        connection, _ = server.accept()
        with connection:
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            request = json.loads(message)
            child = os.fork()
            if child == 0:
                server.close()
                status = 1
                try:
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                    os.chdir(request["cwd"])
                    os.environ.clear()
                    os.environ.update(request["env"])
                    sys.argv = [request["command"], *request["argv"]]
                    status = launch.launch(COMMANDS[request["command"]], request["argv"])
                except SystemExit as stop:
                    status = stop.code if isinstance(stop.code, int) else 1
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(status or 0)
            for fd in fds:
                os.close(fd)
            _, code = os.waitpid(child, 0)
            connection.sendall(STATUS.pack(os.waitstatus_to_exitcode(code)))


def run(path: str, command: str, argv: list[str]) -> int:
    """Hands `command argv` to the server at `path`; its exit status."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    request = {"command": command, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(client, [json.dumps(request).encode()], [0, 1, 2])
    status = client.recv(STATUS.size)
    return STATUS.unpack(status)[0] if len(status) == STATUS.size else 1


@contextlib.contextmanager
def warm_commands(directory: Path) -> Iterator[dict[str, str]]:
    """A server and the shims of `COMMANDS` in `directory`; yields the environment that puts
    them first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    path = str(directory / "server.socket")
    server = subprocess.Popen([sys.executable, __file__, "serve", path],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for command in COMMANDS:
            shim = directory / command
            shim.write_text(f"#!/bin/sh\nexec {sys.executable} {__file__} run {path} {command} "
                            '"$@"\n')
            shim.chmod(0o755)
        while not os.path.exists(path):
            if server.poll() is not None:
                raise RuntimeError("the warm command server stopped while starting")
            time.sleep(0.1)
        yield {**os.environ, "PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(run(sys.argv[2], sys.argv[3], sys.argv[4:]))
