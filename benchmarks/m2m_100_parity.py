"""Imported NLLB-200 / M2M-100 models against transformers' `M2M100ForConditionalGeneration`
and CTranslate2's conversion of the same folders.

Two environments, one folder:

    VENV_HF/bin/python benchmarks/m2m_100_parity.py build WORK_DIR
    python benchmarks/m2m_100_parity.py ours WORK_DIR
    VENV_HF/bin/python benchmarks/m2m_100_parity.py theirs WORK_DIR
    python benchmarks/m2m_100_parity.py compare WORK_DIR

(each step takes the names of the models to run after WORK_DIR; all without).

`build` (transformers 5) writes the folders transformers itself saves (`BUILT`): a
SentencePiece model trained on the tests' sentences, `NllbTokenizer.from_pretrained` of it with
its language codes as `extra_special_tokens` (`<mask>` then before the codes) or
`M2M100Tokenizer(language_codes="m2m100")` over a `vocab.json`, `save_pretrained`, and a
random `M2M100ForConditionalGeneration(M2M100Config(...)).save_pretrained`; the SentencePiece
model stays beside them, as in a folder from the Hub (transformers 5 saves tokenizer.json
without it). `ours` writes the other models in transformers 4's layout
(tests/m2m_100_models.py: NLLB- and M2M-100-style vocabularies, 2+1 and 3+2 layers,
scale_embedding on and off), imports each (and `build`'s) with
`kt-import`'s reader, and writes per language pair (three per model) the source ids our
tokenizer gives, our teacher-forced log-probabilities of generated sentence pairs and our greedy
translations (`TranslationModule`, beam 1, into the target language from the source language) as
their ids. `theirs` (an environment with torch, transformers and ctranslate2, without this
package) tokenizes the same sentences with the folder's own tokenizer (`AutoTokenizer`,
`src_lang`), scores the pairs with `M2M100ForConditionalGeneration`, translates greedily with
its `generate(forced_bos_token_id=...)`, and with the folder converted by CTranslate2's
`TransformersConverter` (`target_prefix` = the language code). Both of theirs are kept from
emitting `<s>` and `<pad>`, which the import leaves out of the ids it can emit, and their
log-probabilities are renormalized over the same ids; their greedy ids are decoded by the
folder's tokenizer with special tokens skipped, which our translations' text must equal.
`compare` prints one JSON line per model.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from spread_weights import spread_weights

VARIANTS = {
    "nllb_2_1": {"style": "nllb"},
    "nllb_3_2_unscaled_sharded": {"style": "nllb", "encoder_layers": 3, "decoder_layers": 2,
                                  "scale_embedding": False, "sharded": True, "seed": 1},
    "m2m100_2_1": {"style": "m2m100", "seed": 2},
    "m2m100_3_2_unscaled": {"style": "m2m100", "encoder_layers": 3, "decoder_layers": 2,
                            "scale_embedding": False, "seed": 3},
    "nllb_transformers5": {"style": "nllb", "built": True, "seed": 4},
    "m2m100_transformers5": {"style": "m2m100", "built": True, "seed": 5},
}
BUILT = {name: fields for name, fields in VARIANTS.items() if fields.get("built")}
NLLB_CODES = ["eng_Latn", "fra_Latn", "deu_Latn", "zho_Hans", "zho_Hant"]
PAIRS = {"nllb": [("eng_Latn", "fra_Latn"), ("fra_Latn", "deu_Latn"), ("deu_Latn", "zho_Hans")],
         "m2m100": [("en", "fr"), ("fr", "de"), ("de", "cs")]}
SCORED, TRANSLATED, EXTRA = 20, 50, 10  # sentences per pair; the search's max_decode_extra
THEIR_EOS = 2


def theirs_of(ids: list[int]) -> list[int]:
    """Our ids as the model's own: our EOS (3) is its `</s>` (2); ids from 4 on are the same."""
    return [THEIR_EOS if index == 3 else index for index in ids]


def until_end(ids: list[int], end: int) -> list[int]:
    """`ids` before the first `end`, padding (0 ours, 1 theirs, after the end only) left out."""
    return ids[:ids.index(end)] if end in ids else [index for index in ids if index > 1]


def build(work_dir: Path) -> None:
    import random
    import shutil

    import sentencepiece as spm
    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from marian_models import training_sentences

    sources, targets = training_sentences()
    for name, fields in BUILT.items():
        folder = work_dir / name / "hf"
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sources + targets), model_prefix=str(folder / "spm"),
            vocab_size=200, model_type="bpe", character_coverage=1.0, hard_vocab_limit=False,
            num_threads=1, minloglevel=2)
        (folder / "spm.vocab").unlink()
        spm_path = (folder / "spm.model").rename(folder / "sentencepiece.bpe.model")
        if fields["style"] == "nllb":
            tokenizer = transformers.NllbTokenizer.from_pretrained(
                folder, extra_special_tokens=NLLB_CODES, src_lang="eng_Latn")
            unused = 2
        else:
            processor = spm.SentencePieceProcessor(model_file=str(spm_path))
            pieces = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
            random.Random(fields["seed"]).shuffle(pieces)
            vocabulary = {**{token: index for index, token in enumerate(
                ["<s>", "<pad>", "</s>", "<unk>"])}, **{piece: 4 + index
                                                        for index, piece in enumerate(pieces)}}
            (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
            tokenizer = transformers.M2M100Tokenizer(
                vocab_file=str(folder / "vocab.json"), spm_file=str(spm_path),
                language_codes="m2m100", src_lang="en", tgt_lang="fr")
            unused = 8
        tokenizer.save_pretrained(folder)
        config = transformers.M2M100Config(
            vocab_size=1 + max(*tokenizer.get_vocab().values(), *getattr(
                tokenizer, "lang_code_to_id", {}).values()) + unused, d_model=32,
            encoder_layers=2, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64, scale_embedding=True,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
        torch.manual_seed(fields["seed"])
        model = transformers.M2M100ForConditionalGeneration(config)
        spread_weights(model, torch)
        with torch.no_grad():
            model.model.shared.weight[1] = 0
        model.save_pretrained(folder)
        print(json.dumps({"variant": name, "files": sorted(path.name for path in folder.iterdir()),
                          "transformers": transformers.__version__}))


def ours(work_dir: Path) -> None:
    import tensorflow as tf

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from m2m_100_models import training_sentences, write_m2m_100_folder

    from keras_transformer.config import BOS_ID, EOS_ID, SearchSettings
    from keras_transformer.data.sentencepiece_pair import SentencePiecePair
    from keras_transformer.decoding.translator import IntoLanguage, TranslationModule
    from keras_transformer.importing.huggingface import read_huggingface_folder
    from keras_transformer.importing.run_directory import imported_transformer

    sources, targets = training_sentences(TRANSLATED, seed=11)
    for name, fields in VARIANTS.items():
        folder = (work_dir / name / "hf" if fields.get("built") else
                  write_m2m_100_folder(work_dir / name / "hf", **fields))
        imported = read_huggingface_folder(folder)
        languages = imported.languages
        model = imported_transformer(imported)
        tokenizer = SentencePiecePair(imported.source_spm, imported.target_spm,
                                      imported.source_pieces, imported.target_pieces,
                                      imported.control_pieces)
        translator = TranslationModule(model, tokenizer, SearchSettings(
            beam_size=1, max_decode_extra=EXTRA), languages=languages)
        records = []
        for source_language, target_language in PAIRS[fields["style"]]:
            source_code = languages.token_ids[source_language]
            target_code = languages.token_ids[target_language]
            scored = []
            for source, target in zip(sources[:SCORED], targets[:SCORED]):
                source_ids = [source_code, *tokenizer.encode(source), EOS_ID]
                labels = [target_code, *tokenizer.encode_batch([target], "target")[0], EOS_ID]
                logits = model((tf.constant([source_ids]), tf.constant([[BOS_ID] + labels[:-1]])),
                               training=False)[0]
                log_probs = tf.nn.log_softmax(logits).numpy()[np.arange(len(labels)), labels]
                scored.append({"source": theirs_of(source_ids), "labels": theirs_of(labels),
                               "ours": log_probs.tolist()})
            into = IntoLanguage(translator, target_language, source_language)
            best = into.translate(tf.constant(sources))
            ids = translator.translate_ids(
                tf.ragged.constant([tokenizer.encode(text) for text in sources]).to_tensor(),
                tf.fill([len(sources)], target_language),
                tf.fill([len(sources)], source_language))["ids"].numpy()
            greedy = [theirs_of(until_end(row.tolist(), EOS_ID)) for row in ids]
            records.append({
                "source_language": source_language, "target_language": target_language,
                "source_code": source_code, "target_code": target_code, "scored": scored,
                "sentences": sources,
                "source_ids": [theirs_of([source_code, *tokenizer.encode(text), EOS_ID])
                               for text in sources],
                "limits": [min(len(tokenizer.encode(text)) + 2 + EXTRA,
                               model.config.max_length) for text in sources],
                "greedy": greedy,
                "translations": [text.decode("utf-8") for text in
                                 best["translation"].numpy().tolist()]})
        (work_dir / name / "ours.json").write_text(json.dumps(records))
        print(json.dumps({"variant": name, "pairs": len(records)}))


def theirs(work_dir: Path) -> None:
    import ctranslate2
    import torch
    import transformers
    from ctranslate2.converters import TransformersConverter

    for name in VARIANTS:
        folder = work_dir / name / "hf"
        records = json.loads((work_dir / name / "ours.json").read_text())
        model = transformers.M2M100ForConditionalGeneration.from_pretrained(folder).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        converted = work_dir / name / "ct2"
        try:
            if not converted.exists():
                TransformersConverter(str(folder)).convert(str(converted), force=True)
        except ValueError as error:  # e.g. a tokenizer whose vocabulary misses the codes
            print(json.dumps({"variant": name, "ctranslate2_conversion": str(error)}))
        ct2 = (ctranslate2.Translator(str(converted), device="cpu", intra_threads=1)
               if converted.exists() else None)
        # Its tokens' ids: the converted vocabulary's (rows the tokenizer names no token, e.g.
        # M2M-100's madeup words, get names of the converter's that the tokenizer reads as UNK).
        ct2_ids = {token: index for index, token in enumerate(json.loads(
            (converted / "shared_vocabulary.json").read_text()))} if ct2 else {}
        for record in records:
            tokenizer.src_lang = record["source_language"]
            record["their_source_ids"] = [tokenizer(text)["input_ids"]
                                          for text in record["sentences"]]
            for pair in record["scored"]:
                labels = pair["labels"]
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([pair["source"]]),
                                   decoder_input_ids=torch.tensor([[THEIR_EOS] + labels[:-1]])
                                   ).logits[0]
                logits[:, :2] = -float("inf")  # <s>, <pad>: ids the import never emits
                rows = torch.arange(len(labels))
                pair["theirs"] = torch.log_softmax(logits, -1)[rows, labels].tolist()
            record["hf_greedy"], record["ct2_greedy"] = [], []
            for source_ids, limit in zip(record["source_ids"], record["limits"]):
                with torch.no_grad():
                    out = model.generate(torch.tensor([source_ids]), num_beams=1,
                                         do_sample=False,
                                         forced_bos_token_id=record["target_code"],
                                         suppress_tokens=[0, 1], max_length=limit + 1,
                                         min_length=0)[0].tolist()
                record["hf_greedy"].append(until_end(out[2:], THEIR_EOS))  # after </s>, code
                record.setdefault("hf_text", []).append(tokenizer.decode(
                    record["hf_greedy"][-1], skip_special_tokens=True))
                if ct2 is None:
                    record["ct2_greedy"].append(None)
                    continue
                tokens = tokenizer.convert_ids_to_tokens(source_ids)
                code = tokenizer.convert_ids_to_tokens(record["target_code"])
                result = ct2.translate_batch(
                    [tokens], target_prefix=[[code]], beam_size=1, max_decoding_length=limit,
                    suppress_sequences=[["<s>"], ["<pad>"]], min_decoding_length=0,
                    return_end_token=False)[0]
                record["ct2_greedy"].append([ct2_ids[token]
                                             for token in result.hypotheses[0][1:]])
        for record in records:
            record["special_ids"] = list(tokenizer.all_special_ids)
        (work_dir / name / "theirs.json").write_text(json.dumps(records))
        print(json.dumps({"variant": name, "transformers": transformers.__version__,
                          "torch": torch.__version__, "ctranslate2": ctranslate2.__version__}))


def compare(work_dir: Path) -> None:
    for name in VARIANTS:
        records = json.loads((work_dir / name / "theirs.json").read_text())
        scored = [pair for record in records for pair in record["scored"]]
        greedy = [(ours_ids, hf, ct2) for record in records
                  for ours_ids, hf, ct2 in zip(record["greedy"], record["hf_greedy"],
                                               record["ct2_greedy"])]
        print(json.dumps({
            "variant": name, "pairs": [f"{r['source_language']}-{r['target_language']}"
                                       for r in records],
            "tokenized_as_theirs": sum(ours_ids == theirs_ids for record in records
                                       for ours_ids, theirs_ids in zip(
                                           record["source_ids"], record["their_source_ids"])),
            "sentences": sum(len(record["sentences"]) for record in records),
            "scored_tokens": sum(len(pair["ours"]) for pair in scored),
            "max_abs_log_prob_difference": max(float(np.abs(np.subtract(
                pair["ours"], pair["theirs"])).max()) for pair in scored),
            "greedy_equal_transformers": sum(a == b for a, b, _ in greedy),
            "greedy_equal_ctranslate2": (sum(a == c for a, _, c in greedy)
                                         if all(c is not None for _, _, c in greedy) else None),
            "text_equal_transformers": sum(ours_text == theirs_text for record in records
                                           for ours_text, theirs_text in zip(
                                               record["translations"], record["hf_text"])),
            "special_tokens_emitted": sum(any(index in specials for index in ids)
                                          for record in records for ids in record["hf_greedy"]
                                          for specials in [set(record["special_ids"])]),
            "greedy_sentences": len(greedy)}))


if __name__ == "__main__":
    step, directory = sys.argv[1], Path(sys.argv[2])
    if sys.argv[3:]:  # the models to run, by name (all without)
        VARIANTS = {name: VARIANTS[name] for name in sys.argv[3:]}
        BUILT = {name: fields for name, fields in BUILT.items() if name in VARIANTS}
    directory.mkdir(parents=True, exist_ok=True)
    {"build": build, "ours": ours, "theirs": theirs, "compare": compare}[step](directory)
