"""An imported Marian model against Hugging Face transformers' own `MarianMTModel`.

Two environments, one folder:

    VENV_HF/bin/python benchmarks/transformers_parity.py build WORK_DIR
    python benchmarks/transformers_parity.py ours WORK_DIR
    VENV_HF/bin/python benchmarks/transformers_parity.py theirs WORK_DIR
    python benchmarks/transformers_parity.py compare WORK_DIR

`build` (transformers 5) writes the folders transformers itself saves (`BUILT`): the tokenizer
of a folder of the tests' writer (tests/marian_models.py) loaded by `MarianTokenizer` (separate
vocabularies where it has two) and saved by its `save_pretrained`, and a random
`MarianMTModel(MarianConfig(...)).save_pretrained` (weights of a size that makes the greedy
choices far apart, the `<pad>` rows zero as in a converted model). `ours` writes the other
random Marian models in Hugging Face's layout (tests/marian_models.py), imports each (and
`build`'s) with `kt-import`'s reader and writes our teacher-forced log-probabilities of
generated sentence pairs and our greedy translations (`TranslationModule`, beam 1) as ids and text;
`theirs` (an environment with torch and transformers, without this package) loads the same
folders with `MarianMTModel.from_pretrained`, writes its log-probabilities and translates
greedily with `generate` (kept from emitting `<pad>`, which the import leaves out, and with
no `</s>` forced at the length limit, which cuts a line as ours does), decoded by
the folder's `MarianTokenizer` with special tokens skipped; `compare` prints the largest
differences, with Hugging Face's softmax over its whole vocabulary and without its appended
`<pad>` column (which Marian's vocabulary does not have), and the greedy translations equal in
ids and text, as one JSON line per model.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from spread_weights import spread_weights

VARIANTS = {"swish_2_2_d32": {}, "relu_3_2_d64": {"activation": "relu", "dim_emb": 64,
                                                  "heads": 8, "enc_depth": 3},
            "transformers5_tied": {"built": True, "seed": 4},
            "transformers5_separate": {"built": True, "tied_all": False, "tied_output": False,
                                       "seed": 5}}
BUILT = {name: fields for name, fields in VARIANTS.items() if fields.get("built")}
SENTENCES, TRANSLATED, EXTRA = 20, 50, 10  # scored, translated; the search's max_decode_extra


def tests_folder(work_dir: Path, name: str, output: str) -> Path:
    """The tests' writer's Hugging Face folder of model `name`, written into `output` of its
    directory."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from marian_models import MarianVariant, write_huggingface_folder, write_marian_model

    fields = {key: value for key, value in VARIANTS[name].items() if key != "built"}
    return write_huggingface_folder(write_marian_model(
        work_dir / name / "marian", MarianVariant(**fields)), work_dir / name / output)


def build(work_dir: Path) -> None:
    import shutil

    import torch
    import transformers

    for name, fields in BUILT.items():
        source = tests_folder(work_dir, name, "tests_hf")  # the tokenizer's files
        folder = work_dir / name / "hf"
        if folder.exists():
            shutil.rmtree(folder)
        tokenizer = transformers.MarianTokenizer.from_pretrained(
            source, separate_vocabs=(source / "target_vocab.json").is_file())
        options = json.loads((source / "config.json").read_text())
        config = transformers.MarianConfig(**{key: value for key, value in options.items()
                                              if key != "model_type"})
        torch.manual_seed(fields["seed"])
        model = transformers.MarianMTModel(config)
        spread_weights(model, torch)
        with torch.no_grad():
            for embedding in {id(module): module for module in (
                    model.get_input_embeddings(), model.model.decoder.embed_tokens,
                    model.get_output_embeddings())}.values():
                embedding.weight[-1] = 0  # the `<pad>` row, the decoding start
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        print(json.dumps({"variant": name, "files": sorted(path.name for path in folder.iterdir()),
                          "transformers": transformers.__version__}))


def ours(work_dir: Path) -> None:
    import tensorflow as tf

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from marian_models import tokenize, training_sentences

    from keras_transformer.config import BOS_ID, EOS_ID, SearchSettings
    from keras_transformer.data.sentencepiece_pair import SentencePiecePair
    from keras_transformer.decoding.translator import TranslationModule
    from keras_transformer.importing.huggingface import read_huggingface_folder
    from keras_transformer.importing.run_directory import imported_transformer

    for name, fields in VARIANTS.items():
        folder = (work_dir / name / "hf" if fields.get("built")
                  else tests_folder(work_dir, name, "hf"))
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
        tokenizer = SentencePiecePair(imported.source_spm, imported.target_spm,
                                      imported.source_pieces, imported.target_pieces,
                                      imported.control_pieces)
        translator = TranslationModule(model, tokenizer, SearchSettings(beam_size=1,
                                                                 max_decode_extra=EXTRA))
        sentences = training_sentences(TRANSLATED, seed=12)[0]
        source_ids = [tokenizer.encode(text) for text in sentences]
        ids = translator.translate_ids(tf.ragged.constant(source_ids).to_tensor())["ids"]
        greedy = [[target_vocabulary[imported.target_pieces[index]] for index in row[:(
            row.index(EOS_ID) if EOS_ID in row else len(row))] if index != 0]
                  for row in ids.numpy().tolist()]
        texts = translator.translate(tf.constant(sentences))["translation"].numpy().tolist()
        (work_dir / name / "greedy.json").write_text(json.dumps({
            "source_ids": [[vocabulary[imported.source_pieces[index]] for index in row] + [0]
                           for row in source_ids],
            "limits": [min(len(row) + 1 + EXTRA, model.config.max_length) for row in source_ids],
            "greedy": greedy, "translations": [text.decode("utf-8") for text in texts]}))
        print(json.dumps({"variant": name, "sentences": len(pairs), "translated": len(greedy)}))


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
        folder = work_dir / name / "hf"
        tokenizer = transformers.MarianTokenizer.from_pretrained(
            folder, separate_vocabs=(folder / "target_vocab.json").is_file())
        greedy = json.loads((work_dir / name / "greedy.json").read_text())
        greedy["hf_greedy"], greedy["hf_text"] = [], []
        for source_ids, limit in zip(greedy["source_ids"], greedy["limits"]):
            with torch.no_grad():
                out = model.generate(torch.tensor([source_ids]), num_beams=1, do_sample=False,
                                     suppress_tokens=[start], max_length=limit + 1,
                                     min_length=0, forced_eos_token_id=None,
                                     )[0].tolist()[1:]  # after the start
            out = out[:out.index(model.config.eos_token_id)] if (
                model.config.eos_token_id in out) else out
            greedy["hf_greedy"].append(out)
            greedy["hf_text"].append(tokenizer.decode(out, skip_special_tokens=True))
        (work_dir / name / "greedy.json").write_text(json.dumps(greedy))
        print(json.dumps({"variant": name, "transformers": transformers.__version__,
                          "torch": torch.__version__}))


def compare(work_dir: Path) -> None:
    for name in VARIANTS:
        pairs = json.loads((work_dir / name / "pairs.json").read_text())
        largest = {key: max(float(np.abs(np.subtract(pair["ours"], pair[key])).max())
                            for pair in pairs) for key in ("theirs", "theirs_without_pad")}
        greedy = json.loads((work_dir / name / "greedy.json").read_text())
        print(json.dumps({"variant": name, "sentences": len(pairs),
                          "tokens": sum(len(pair["ours"]) for pair in pairs),
                          "max_abs_log_prob_difference": largest["theirs"],
                          "max_abs_without_the_pad_column": largest["theirs_without_pad"],
                          "greedy_equal_transformers": sum(
                              ours == theirs for ours, theirs in zip(greedy["greedy"],
                                                                     greedy["hf_greedy"])),
                          "text_equal_transformers": sum(
                              ours == theirs for ours, theirs in zip(greedy["translations"],
                                                                     greedy["hf_text"])),
                          "translated": len(greedy["greedy"])}))


if __name__ == "__main__":
    step, directory = sys.argv[1], Path(sys.argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    {"build": build, "ours": ours, "theirs": theirs, "compare": compare}[step](directory)
