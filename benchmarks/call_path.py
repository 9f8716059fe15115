"""How far a reader follows one sentence: the calls from a command's `main` to equation (1)
(`scaled_dot_product_attention`), and the files they pass through, for the encoder, a decoding
step and a training step.

    python benchmarks/call_path.py

Translates one line with a random one-layer model (the tests' `random_run`) through
`trainers.translate.main`, and records the Python stack at the first call of
`scaled_dot_product_attention` (made while the search's graph is traced: the encoder's) and at
its first call inside `Transformer.decode_step` (a decoding step's self-attention). Then trains
a one-layer model one step with the fast kernels through `trainers.train.main` and records the
stack at the first call inside `FastTransformer.train_step` (the encoder's self-attention, on
the packed tokens). For each path prints the project's frames on that stack from `main` down,
one per line (file:line function), then one JSON line: the path, the calls (project frames),
the distinct project files, and the frames of other libraries (Keras, TensorFlow) between them.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = "scaled_dot_product_attention"


def first_stacks(function, target: str, paths: dict[str, str]
                 ) -> dict[str, list[tuple[str, int, str, object]]]:
    """For each path of `paths` (name -> a function name on the stack, or "" for none), the
    frames (outermost first) on the stack at `function()`'s first call of a function named
    `target` made from within that path's function, as (file, line, function name, code
    object) read at that moment."""
    found: dict[str, list] = {}

    def profile(frame, event, _):
        if event != "call" or frame.f_code.co_name != target:
            return
        stack = []
        while frame is not None:
            stack.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                          frame.f_code))
            frame = frame.f_back
        names = {name for _, _, name, _ in stack}
        for path, within in paths.items():
            if path not in found and (not within or within in names):
                found[path] = stack[::-1]
        if len(found) == len(paths):
            sys.setprofile(None)

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return found


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import random_run, train_vocab

    from keras_transformer.data import write_demo_corpus
    from keras_transformer.data.text_files import read_parallel
    from trainers import translate

    from trainers import train

    with tempfile.TemporaryDirectory(prefix="call_path-") as directory:
        work = Path(directory)
        paths = write_demo_corpus(work / "data")
        vocabulary = train_vocab(read_parallel(*paths["train"]), 500, work / "vocab")
        run = random_run(vocabulary, work / "run")
        source = work / "in.en"
        source.write_text("a man rides a bike\n", encoding="utf-8")
        stacks = first_stacks(lambda: translate.main([str(run.root), str(source),
                                                      "--output", str(work / "out")]),
                              TARGET, {"encoder": "encode", "decoding step": "decode_step"})
        stacks.update(first_stacks(lambda: train.main([
            "--preset", "tiny", *(f"--set={setting}" for setting in (
                "vocab_size=400", "num_layers=1", "batch_tokens=512")),
            "--train-src", paths["train"][0], "--train-tgt", paths["train"][1],
            "--dev-src", paths["dev"][0], "--dev-tgt", paths["dev"][1],
            "--output-dir", str(work / "trained"), "--steps", "1", "--kernels", "fast",
            "--precision", "float32", "--eval-sentences", "1", "--attention-sentences", "0",
            "--progress-seconds", "0", "--no-export"]), TARGET, {"training step": "train_step"}))
    project = tuple(str(ROOT / folder) + os.sep for folder in ("keras_transformer", "trainers"))
    mains = {"encoder": translate.main, "decoding step": translate.main,
             "training step": train.main}
    for name, main_function in mains.items():
        if name not in stacks:
            raise SystemExit(f"{TARGET} was never called on the {name}'s path")
        stack = stacks[name]
        start = [code for *_, code in stack].index(main_function.__code__)
        path = [frame for frame in stack[start:] if frame[0].startswith(project)]
        for file, line, function, _ in path:
            print(f"{Path(file).relative_to(ROOT)}:{line} {function}")
        print(json.dumps({"path": name, "calls": len(path),
                          "files": len({file for file, *_ in path}),
                          "other_frames": len(stack) - start - len(path)}))


if __name__ == "__main__":
    main()
