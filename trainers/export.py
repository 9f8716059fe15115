"""`kt-export`: writes a trained model (a run directory, or a `.keras` file and its vocabulary) as a
TF Serving SavedModel under `<base-dir>/<name>/<N>/`, or as a CTranslate2 or LiteRT model
(`--format`), recording where it came from (`--describe` prints that). Its manual:
docs/decoding-and-serving.md, "Export with kt-export".
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Any, Callable, Optional, Sequence

import keras_transformer  # noqa: F401  (selects the TensorFlow backend before keras loads)
import keras
import tensorflow as tf

from keras_transformer.data.demo_corpus import DEMO_LANGS
from keras_transformer.data.text_files import iter_parallel
from keras_transformer.data.sentencepiece_pair import load_tokenizer, vocabulary_pieces
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.shortlist import VocabularyShortlist, build_shortlist
from keras_transformer.decoding.alignment import read_alignment_heads
from keras_transformer.serving import ctranslate2_export, litert_export
from keras_transformer.serving.export import (check_model_tree, export_translator,
                                              publish_version)
from keras_transformer.model import Transformer
from keras_transformer.training.probes import choose_serving_dtype
from keras_transformer.config import (CTRANSLATE2_QUANTIZATIONS, LITERT_QUANTIZATIONS,
                                      SearchSettings)
from keras_transformer.serving.provenance import (describe, export_record, file_provenance,
                                          read_provenance, write_provenance)
from keras_transformer.training.run_dir import RunDir
from trainers.arguments import SHORTLIST_SENTENCES, export_parser, given_search_flags
from trainers.common import run_model, search_settings, set_up_implementation


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options, checked (`argv`: default `sys.argv[1:]`)."""
    parser = export_parser()
    args = parser.parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    if args.describe:
        if args.model or args.vocabulary or args.name:
            parser.error("--describe: takes an export alone (no model, vocabulary or --name)")
        return args
    if args.vocabulary is None and args.model and not os.path.exists(args.model):
        parser.error(missing_model(args.model))  # not the vocabulary it would have supplied
    if args.vocabulary is None and args.model and os.path.isdir(os.path.join(args.model,
                                                                              "vocab")):
        args.vocabulary = os.path.join(args.model, "vocab")
    missing = [name for name, value in (("model", args.model), ("vocabulary", args.vocabulary),
                                        ("--name", args.name)) if not value]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    if "--warmup-max-width" in given and not args.xla:
        parser.error("--warmup-max-width: --xla exports only (a graph export's warm-up is one "
                     "request per signature)")
    if args.warmup_max_width < 1:
        parser.error(f"--warmup-max-width: must be positive, got {args.warmup_max_width}")
    if args.source_length is not None and args.format != "litert":
        parser.error("--source-length: --format litert only")
    if args.xla and args.format != "savedmodel":
        parser.error("--xla: SavedModel exports only")
    if args.shortlist_data and not args.shortlist:
        parser.error("--shortlist-data: needs --shortlist")
    if args.format != "savedmodel" and (args.shortlist or args.precision != "float32"):
        parser.error("--shortlist and --precision: SavedModel exports only (a CTranslate2 or "
                     "LiteRT model's precision is its --quantization)")
    if args.format == "savedmodel" and args.quantization is not None:
        parser.error("--quantization: --format ctranslate2 or litert only")
    allowed = {"ctranslate2": CTRANSLATE2_QUANTIZATIONS, "litert": LITERT_QUANTIZATIONS}.get(
        args.format, ())
    if args.quantization is None and allowed:
        args.quantization = allowed[0] if args.format == "litert" else "int8"
    if args.quantization is not None and args.quantization not in allowed:
        parser.error(f"--quantization: {args.quantization} is not one of --format "
                     f"{args.format}'s ({', '.join(allowed)})")
    return args


def shortlist_sizes(text: str) -> tuple[int, int]:
    """`--shortlist`'s "FREQUENT,PER_SOURCE" as two integers."""
    try:
        frequent, per_source = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--shortlist: expected FREQUENT,PER_SOURCE (two integers, e.g. "
                         f"1000,20), got {text!r}") from None
    if frequent < 0 or per_source < 1:
        raise ValueError(f"--shortlist: needs FREQUENT >= 0 and PER_SOURCE >= 1, got {text!r}")
    return frequent, per_source


def learn_shortlist(sizes: Optional[str], data: Optional[Sequence[str]], model_path: str,
                    tokenizer: SubwordTokenizer) -> Optional[VocabularyShortlist]:
    """The shortlist of `--shortlist` `sizes` ("FREQUENT,PER_SOURCE"; None: no shortlist)
    learned from the parallel files `data` (SRC, TGT[, SRC, TGT ...]), by default those the run
    directory `model_path` was trained from."""
    if not sizes:
        return None
    frequent, per_source = shortlist_sizes(sizes)
    data = data or _training_files(model_path)
    if not data:
        raise ValueError("--shortlist-data: needed (the model is not a run directory trained "
                         "from --train-src/--train-tgt files or on the demo corpus)")
    sources, targets = [], []
    for source_path, target_path in zip(data[::2], data[1::2]):
        for source, target in iter_parallel(source_path, target_path):
            if len(sources) == SHORTLIST_SENTENCES:
                break
            if source and target:
                sources.append(source)
                targets.append(target)
    print(f"kt-export: shortlist from {len(sources):,} pairs of {', '.join(data)}",
          file=sys.stderr)
    source_pieces, target_pieces = vocabulary_pieces(tokenizer)
    return build_shortlist(_ids(tokenizer.tokenize, sources),
                           _ids(tokenizer.tokenize_target, targets),
                           vocab_size=len(source_pieces), frequent=frequent,
                           per_source=per_source, target_vocab_size=len(target_pieces))


def _training_files(model_path: str) -> Optional[list[str]]:
    """The (source, target) training files of the run directory `model_path`, if it has any:
    its `--train-src`/`--train-tgt`, or the demo corpus it wrote."""
    if not os.path.isdir(model_path):
        return None
    options = RunDir(model_path).recorded_options()
    if options.get("train_src") and options.get("train_tgt"):
        def listed(files):  # a path, or a list of them (several corpora)
            return [files] if isinstance(files, str) else list(files)
        return [path for pair in zip(listed(options["train_src"]), listed(options["train_tgt"]))
                for path in pair]
    demo = [os.path.join(model_path, "demo_corpus", f"train.{lang}") for lang in DEMO_LANGS]
    if not options.get("tfds") and all(os.path.isfile(path) for path in demo):
        return demo
    return None


def _ids(tokenize: Callable[[tf.Tensor], tf.RaggedTensor], texts: list[str],
         batch: int = 10_000) -> list[list[int]]:
    """`texts` as ids, `tokenize`d `batch` at a time."""
    ids: list[list[int]] = []
    for start in range(0, len(texts), batch):
        ids.extend(tokenize(tf.constant(texts[start:start + batch])).to_list())
    return ids


def serving_dtype(wanted: str, model: Transformer, settings: SearchSettings) -> str:
    """`wanted`, or for "auto" the probe's choice at this model's decoding sizes (a batch of 32
    sentences' hypotheses), printed with its figures."""
    if wanted != "auto":
        return wanted
    config = model.config
    result = choose_serving_dtype(config.d_model, config.d_ff, 32 * settings.beam_size)
    print(f"kt-export: precision {result.describe()}", file=sys.stderr)
    return result.choice


def load_model(path: str, weights: Optional[str] = None
               ) -> tuple[Transformer, SearchSettings, dict[str, Any]]:
    """The `Transformer` saved at `path` (the layouts docs/decoding-and-serving.md's "Export with
    kt-export" lists), its default search settings (a run's recipe's; the paper's for a .keras
    file) and the facts of its origin an export records (`RunDir.provenance` or
    `provenance.file_provenance`)."""
    if os.path.isfile(path):
        return (_checked(keras.saving.load_model(path), path), SearchSettings(),
                file_provenance(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model: no such file or directory: {path!r}")
    archives = _newest(glob.glob(os.path.join(path, "*.keras")))
    if archives and not weights:
        return (_checked(keras.saving.load_model(archives), archives), SearchSettings(),
                file_provenance(archives))
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"model: {path!r} holds neither a .keras file nor a run's "
                                "config.json")
    run = RunDir(path)
    return run_model(path, weights), run.load_recipe().search, run.provenance(weights)


def _newest(paths: list[str]) -> Optional[str]:
    return max(paths, key=os.path.getmtime) if paths else None


def _checked(model: keras.Model, path: str) -> Transformer:
    """`model` if it is a `Transformer` (a ValueError naming `path` if not), its implementation
    selected (`set_up_implementation`)."""
    if not isinstance(model, Transformer):
        raise ValueError(f"model: {path!r} holds a {type(model).__name__}, not a Transformer")
    set_up_implementation()
    return model


def describe_export(path: str) -> int:
    """Prints the provenance record of the export at `path`; returns the exit status (2, with
    an error naming the path, when it is no export or has no record)."""
    try:
        version, record = read_provenance(path)
    except (FileNotFoundError, ValueError) as error:
        print(f"kt-export: error: --describe: {error}", file=sys.stderr)
        return 2
    print(describe(version, record))
    return 0


def missing_model(model: str) -> str:
    """The error of a `model` argument that does not exist (named before any other)."""
    return f"model: {model!r} does not exist"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 on a user error)."""
    args = parse_args(argv)
    if args.describe:
        return describe_export(args.describe)
    try:
        if not os.path.exists(args.model):
            raise FileNotFoundError(missing_model(args.model))
        check_model_tree(args.base_dir, args.name)  # before the minutes a model may take
        tokenizer = load_tokenizer(args.vocabulary)
        model, defaults, source = load_model(args.model, args.weights)
        settings = search_settings(given_search_flags(vars(args)), defaults)
        languages = RunDir(args.model).languages() if os.path.isdir(args.model) else None
        alignment = (read_alignment_heads(args.model, model.config)
                     if os.path.isdir(args.model) else None)
        if args.format != "savedmodel":
            extra = {}
            if args.format == "litert":  # refusals before a conversion's minutes
                litert_export.check_source_length(args.source_length, model.config.max_length)
                extra["source_length"] = args.source_length
            extra["alignment"] = alignment
            writer, unsupported = (
                (ctranslate2_export.export_ctranslate2, ctranslate2_export.UNSUPPORTED)
                if args.format == "ctranslate2" else
                (litert_export.export_litert, litert_export.UNSUPPORTED))

            def write(staging: str) -> str:
                saved = os.fspath(writer(model, tokenizer, os.path.join(staging, "model"),
                                         quantization=args.quantization, settings=settings,
                                         languages=languages, **extra))
                write_provenance(saved, export_record(
                    model.config, settings, source, format=args.format,
                    quantization=args.quantization, unsupported=unsupported,
                    **({"languages": languages.to_dict()} if languages else {})))
                return saved

            path = publish_version(write, args.name, args.base_dir)
            print(f"kt-export: unlike a SavedModel, this export has "
                  f"{'; '.join(unsupported.values())}", file=sys.stderr)
        else:
            shortlist = learn_shortlist(args.shortlist, args.shortlist_data, args.model,
                                        tokenizer)
            path = export_translator(model, tokenizer, args.name, base_dir=args.base_dir,
                                     settings=settings,
                                     dtype=serving_dtype(args.precision, model, settings),
                                     shortlist=shortlist, jit_compile=args.xla,
                                     provenance=source,
                                     warmup_max_width=args.warmup_max_width,
                                     languages=languages, alignment=alignment)
    except ImportError as error:
        print(f"kt-export: error: --format ctranslate2 needs the ctranslate2 package ({error}); "
              "pip install -e '.[ctranslate2]'", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as error:
        print(f"kt-export: error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
