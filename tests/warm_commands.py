"""Command lines and Python scripts started warm, for tests that start many (the distillation
pipeline, the clusters of processes): one server process imports TensorFlow and the commands
once; each `kt-*` command (and `kt-python -c SCRIPT`) started is a small client (a shim on PATH)
that hands its arguments, working directory, environment and standard streams to the server,
which forks a child to run it and answers with its exit status. A child is a process of its own
as a command started cold is (its own TensorFlow runtime: the server never runs an op), minus
the seconds of imports; children run at once (the workers of one cluster).

    with warm_commands(directory) as env:   # env: os.environ with the shims first on PATH
        subprocess.run(["bash", "script.sh"], env=env)

The suite's `warm` fixture (conftest.py) is one server per test process. A test that kills a
command mid-run (SIGKILL reaches the child, not its client) starts it with `start_warm`, whose
`WarmProcess` signals the child itself: the server hands each client its child's pid, which the
client writes to the file `KT_WARM_PID_FILE` names.

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
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
# The console scripts setup.py declares, by the launcher command each runs.
COMMANDS = {"kt-train": "train", "kt-evaluate": "evaluate", "kt-export": "export",
            "kt-translate": "translate", "kt-translate-corpus": "translate_corpus",
            "kt-average-checkpoints": "average_checkpoints", "kt-prepare": "prepare"}
DIRECTORY = "KT_WARM_DIRECTORY"  # the environment's name of the shims' directory
SCRIPT_COMMAND = "kt-python"  # `kt-python -c SCRIPT`: the script run as `python -c` runs it
STATUS = struct.Struct("!i")  # the child's pid, then its exit status


def serve(path: str) -> None:
    """Imports the commands, then runs each request in a forked child; a thread per request
    answers its client (the child's pid, then its exit status)."""
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
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        request = json.loads(message)
        child = os.fork()
        if child == 0:
            server.close()
            connection.close()
            _run_child(request, fds, launch)
        for fd in fds:
            os.close(fd)
        threading.Thread(target=_answer, args=(connection, child), daemon=True).start()


def _run_child(request: dict, fds: list[int], launch) -> None:
    """In the forked child: the request's streams, directory, environment and command; exits
    with its status."""
    status = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request["command"] == SCRIPT_COMMAND:
            if request["argv"][:1] != ["-c"] or len(request["argv"]) < 2:
                raise SystemExit(f"{SCRIPT_COMMAND}: usage: {SCRIPT_COMMAND} -c SCRIPT [ARGS]")
            sys.argv = ["-c", *request["argv"][2:]]
            sys.path.insert(0, request["cwd"])
            exec(compile(request["argv"][1], "<string>", "exec"), {"__name__": "__main__"})
            status = 0
        else:
            sys.argv = [request["command"], *request["argv"]]
            status = launch.launch(COMMANDS[request["command"]], request["argv"])
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # a script's uncaught error: its traceback, as Python prints it
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status or 0)


def _answer(connection: socket.socket, child: int) -> None:
    """Sends the client its child's pid, then the child's exit status once it ends."""
    with connection:
        with contextlib.suppress(OSError):  # a client killed: its child still reaped
            connection.sendall(STATUS.pack(child))
        _, code = os.waitpid(child, 0)
        with contextlib.suppress(OSError):
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
    """A command started warm (`start_warm`): its client's `subprocess.Popen` (`poll`, `wait`,
    `communicate`, `returncode`, ...), but `send_signal` and `kill` reach the command's own
    process."""

    def __init__(self, client: subprocess.Popen, pid_file: Path):
        self.client, self.pid_file = client, pid_file

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    def send_signal(self, signum: int) -> None:
        """Signals the command's process (once the server has started it; nothing once its
        client has ended, which it does when the command has)."""
        while not self.pid_file.read_text():
            if self.client.poll() is not None:
                return
            time.sleep(0.001)
        if self.client.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(self.pid_file.read_text()), signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_warm(warm: dict[str, str], command: str, argv: list[str], log: Path | None = None,
               **popen) -> WarmProcess:
    """`command argv` (`command` a shim's name: `COMMANDS`, `SCRIPT_COMMAND`; `argv` its
    arguments) started through the warm server of `warm`, the environment `warm_commands` yields,
    from the project root, as its `WarmProcess`; its output appended to the file `log` (or, with
    None, as `popen`'s `subprocess.Popen` options say; an `env` among them is the command's
    environment in place of `warm`, but PATH)."""
    pid_file = Path(tempfile.mkstemp(suffix=".pid", dir=warm[DIRECTORY])[1])
    base = popen.get("env", warm)  # the child's environment: `popen`'s, the shims on its PATH
    options = {"cwd": ROOT, **popen, "env": {**base, "PATH": warm["PATH"],
                                             DIRECTORY: warm[DIRECTORY],
                                             "KT_WARM_PID_FILE": str(pid_file)}}
    if log is None:
        return WarmProcess(subprocess.Popen([command, *argv], **options), pid_file)
    with open(log, "ab") as output:
        return WarmProcess(subprocess.Popen([command, *argv], stdout=output,
                                            stderr=subprocess.STDOUT, **options), pid_file)


@contextlib.contextmanager
def warm_commands(directory: Path) -> Iterator[dict[str, str]]:
    """A server and the shims of `COMMANDS` in `directory`; yields the environment that puts
    them first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    path = str(directory / "server.socket")
    server = subprocess.Popen([sys.executable, __file__, "serve", path],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for command in [*COMMANDS, SCRIPT_COMMAND]:
            shim = directory / command
            shim.write_text(f"#!/bin/sh\nexec {sys.executable} {__file__} run {path} {command} "
                            '"$@"\n')
            shim.chmod(0o755)
        while not os.path.exists(path):
            if server.poll() is not None:
                raise RuntimeError("the warm command server stopped while starting")
            time.sleep(0.1)
        yield {**os.environ, "PATH": f"{directory}{os.pathsep}{os.environ['PATH']}",
               DIRECTORY: str(directory)}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(run(sys.argv[2], sys.argv[3], sys.argv[4:]))
