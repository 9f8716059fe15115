"""An imported Marian model against Hugging Face transformers' own `MarianMTModel`.

Two environments, one folder:

    python benchmarks/transformers_parity.py ours WORK_DIR
    VENV_HF/bin/python benchmarks/transformers_parity.py theirs WORK_DIR
    python benchmarks/transformers_parity.py compare WORK_DIR

`ours` writes random Marian models (tests/marian_models.py) in Hugging Face's layout, imports
each with `kt-import`'s reader and writes our teacher-forced log-probabilities of generated
sentence pairs; `theirs` (an environment with torch and transformers 4.x, without this package)
loads the same folders with `MarianMTModel.from_pretrained` and writes theirs; `compare` prints
the largest differences, with Hugging Face's softmax over its whole vocabulary and without its
appended `<pad>` column (which Marian's vocabulary does not have), as one JSON line.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

VARIANTS = {"swish_2_2_d32": {}, "relu_3_2_d64": {"activation": "relu", "dim_emb": 64,
                                                  "heads": 8, "enc_depth": 3}}
SENTENCES = 20


def ours(work_dir: Path) -> None:
    import tensorflow as tf

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from marian_models import (MarianVariant, tokenize, training_sentences,
                               write_huggingface_folder, write_marian_model)

    from keras_transformer.importing.huggingface import read_huggingface_folder
    from keras_transformer.importing.run_directory import imported_transformer
    from keras_transformer.config import BOS_ID, EOS_ID

    for name, fields in VARIANTS.items():
        folder = write_huggingface_folder(
            write_marian_model(work_dir / name / "marian", MarianVariant(**fields)),
            work_dir / name / "hf")
        imported = read_huggingface_folder(folder)
        model = imported_transformer(imported)
        source_index = {piece: index for index, piece in enumerate(imported.source_pieces)}
        target_index = {piece: index for index, piece in enumerate(imported.target_pieces)}
        vocabulary = json.loads((folder / "vocab.json").read_text())
        target_path = folder / "target_vocab.json"
        target_vocabulary = (json.loads(target_path.read_text()) if target_path.is_file()
                             else vocabulary)
        pairs = []
        for source, target in zip(*training_sentences(SENTENCES, seed=11)):
            source_pieces = tokenize(folder, source, "source")
            target_pieces = tokenize(folder, target, "target")
            source_ids = [source_index[piece] for piece in source_pieces] + [EOS_ID]
            target_ids = [target_index[piece] for piece in target_pieces]
            logits = model((tf.constant([source_ids]), tf.constant([[BOS_ID] + target_ids])),
                           training=False)[0]
            log_probs = tf.nn.log_softmax(logits).numpy()[np.arange(len(target_ids) + 1),
                                                          target_ids + [EOS_ID]]
            pairs.append({"source": [vocabulary[piece] for piece in source_pieces] + [0],
                          "target": [target_vocabulary[piece] for piece in target_pieces] + [0],
                          "ours": log_probs.tolist()})
        (work_dir / name / "pairs.json").write_text(json.dumps(pairs))


def theirs(work_dir: Path) -> None:
    import torch
    import transformers

    for name in VARIANTS:
        model = transformers.MarianMTModel.from_pretrained(work_dir / name / "hf").eval()
        start = model.config.decoder_start_token_id  # its `<pad>`, the last id
        pairs = json.loads((work_dir / name / "pairs.json").read_text())
        for pair in pairs:
            target = pair["target"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([pair["source"]]),
                               decoder_input_ids=torch.tensor([[start] + target[:-1]])
                               ).logits[0]
            rows = torch.arange(len(target))
            pair["theirs"] = torch.log_softmax(logits, -1)[rows, target].tolist()
            without_pad = logits[:, :start]
            pair["theirs_without_pad"] = torch.log_softmax(without_pad, -1)[rows, target].tolist()
        (work_dir / name / "pairs.json").write_text(json.dumps(pairs))
        print(json.dumps({"variant": name, "transformers": transformers.__version__,
                          "torch": torch.__version__}))


def compare(work_dir: Path) -> None:
    for name in VARIANTS:
        pairs = json.loads((work_dir / name / "pairs.json").read_text())
        largest = {key: max(float(np.abs(np.subtract(pair["ours"], pair[key])).max())
                            for pair in pairs) for key in ("theirs", "theirs_without_pad")}
        print(json.dumps({"variant": name, "sentences": len(pairs),
                          "tokens": sum(len(pair["ours"]) for pair in pairs),
                          "max_abs_log_prob_difference": largest["theirs"],
                          "max_abs_without_the_pad_column": largest["theirs_without_pad"]}))


if __name__ == "__main__":
    step, directory = sys.argv[1], Path(sys.argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    {"ours": ours, "theirs": theirs, "compare": compare}[step](directory)
