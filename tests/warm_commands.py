"""Command lines started warm, for tests that run a script of many of them (the distillation
pipeline): one server process imports TensorFlow and the commands once; each `kt-*` command the
script starts is a small client (a shim on PATH) that hands its arguments, working directory,
environment and standard streams to the server, which forks a child to run it and answers with
its exit status. A child is a process of its own as a command started cold is (its own
TensorFlow runtime: the server never runs an op), minus the seconds of imports.

    with warm_commands(directory) as env:   # env: os.environ with the shims first on PATH
        subprocess.run(["bash", "script.sh"], env=env)

A test that kills a command mid-run (SIGKILL reaches the child, not its client) starts it with
`start_warm`, whose `WarmProcess` signals the child itself: the server hands each client its
child's pid, which the client writes to the file `KT_WARM_PID_FILE` names.

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
STATUS = struct.Struct("!i")  # the child's pid, then its exit status


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
            connection.sendall(STATUS.pack(child))
            _, code = os.waitpid(child, 0)
            connection.sendall(STATUS.pack(os.waitstatus_to_exitcode(code)))


def run(path: str, command: str, argv: list[str]) -> int:
    """Hands `command argv` to the server at `path`; its exit status."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    request = {"command": command, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(client, [json.dumps(request).encode()], [0, 1, 2])
    child = _received(client)
    if child is not None and os.environ.get("KT_WARM_PID_FILE"):
        Path(os.environ["KT_WARM_PID_FILE"]).write_text(str(child))
    status = _received(client)
    return 1 if status is None else status


def _received(client: socket.socket) -> int | None:
    """The next integer the server sends (None: the connection closed first)."""
    data = b""
    while len(data) < STATUS.size:
        chunk = client.recv(STATUS.size - len(data))
        if not chunk:
            return None
        data += chunk
    return STATUS.unpack(data)[0]


class WarmProcess:
    """A command started warm (`start_warm`): its client's `poll` and `wait`, and
    `send_signal` to the command's own process."""

    def __init__(self, client: subprocess.Popen, pid_file: Path):
        self.client, self.pid_file = client, pid_file

    def poll(self) -> int | None:
        return self.client.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.client.wait(timeout)

    def send_signal(self, signum: int) -> None:
        """Signals the command's process (once the server has started it)."""
        while not self.pid_file.exists() or not self.pid_file.read_text():
            if self.client.poll() is not None:
                return
            time.sleep(0.001)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(self.pid_file.read_text()), signum)


def start_warm(env: dict[str, str], command: str, argv: list[str], log: Path) -> WarmProcess:
    """`command argv` started through the warm server of `env` (`warm_commands`), its output
    appended to `log`."""
    pid_file = log.with_name(f"{log.name}.pid")
    pid_file.unlink(missing_ok=True)
    with open(log, "ab") as output:
        client = subprocess.Popen([command, *argv], cwd=ROOT, stdout=output,
                                  stderr=subprocess.STDOUT,
                                  env={**env, "KT_WARM_PID_FILE": str(pid_file)})
    return WarmProcess(client, pid_file)


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
