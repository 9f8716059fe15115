"""How far a reader follows one sentence: the calls from kt-translate's `main` to equation (1)
(`scaled_dot_product_attention`), and the files they pass through.

    python benchmarks/call_path.py

Translates one line with a random one-layer model (the tests' `random_run`) through
`trainers.translate.main`, and records the Python stack at the first call of
`scaled_dot_product_attention` (made while the search's graph is traced). Prints the project's
frames on that stack from `main` down, one per line (file:line function), then one JSON line:
the calls (project frames), the distinct project files, and the frames of other libraries
(Keras, TensorFlow) between them.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = "scaled_dot_product_attention"


def first_stack(function, target: str) -> list[tuple[str, int, str, object]]:
    """The frames (outermost first) on the stack at `function()`'s first call of a function
    named `target`, as (file, line, function name, code object) read at that moment."""
    found = []

    def profile(frame, event, _):
        if event == "call" and not found and frame.f_code.co_name == target:
            while frame is not None:
                found.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                              frame.f_code))
                frame = frame.f_back
            sys.setprofile(None)

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return found[::-1]


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import random_run, train_vocab

    from keras_transformer.data import write_demo_corpus
    from keras_transformer.data.text_files import read_parallel
    from trainers import translate

    with tempfile.TemporaryDirectory(prefix="call_path-") as directory:
        work = Path(directory)
        paths = write_demo_corpus(work / "data")
        vocabulary = train_vocab(read_parallel(*paths["train"]), 500, work / "vocab")
        run = random_run(vocabulary, work / "run")
        source = work / "in.en"
        source.write_text("a man rides a bike\n", encoding="utf-8")
        stack = first_stack(lambda: translate.main([str(run.root), str(source),
                                                    "--output", str(work / "out")]), TARGET)
    if not stack:
        raise SystemExit(f"{TARGET} was never called")
    start = [code for *_, code in stack].index(translate.main.__code__)
    project = tuple(str(ROOT / folder) + os.sep for folder in ("keras_transformer", "trainers"))
    path = [frame for frame in stack[start:] if frame[0].startswith(project)]
    for file, line, name, _ in path:
        print(f"{Path(file).relative_to(ROOT)}:{line} {name}")
    print(json.dumps({"calls": len(path), "files": len({file for file, *_ in path}),
                      "other_frames": len(stack) - start - len(path)}))

if __name__ == "__main__":
    main()
