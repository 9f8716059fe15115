"""Every command line's grammar: the options of each `kt-*` command (and of `python -m
trainers moses_form` / `prepare_parsing`) and the option groups they share, built from
`keras_transformer.config` alone (which imports nothing heavy) so that `--help` answers without
importing TensorFlow (`trainers.launch`). Each command checks what it parsed itself."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
from typing import Any, Callable, Mapping

from keras_transformer.config import (CTRANSLATE2_QUANTIZATIONS, DEFAULT_SHARD_PAIRS,
                                      DEFAULT_STEPS, IMPLEMENTATION_CHOICES,
                                      IMPLEMENTATION_VARIABLE, LEAVES, LITERT_QUANTIZATIONS,
                                      PLACEMENTS, PRECISION_CHOICES, PRESETS, SERVING_DTYPES,
                                      WARMUP_MAX_WIDTH)

# kt-train's and kt-prepare's: storage prepared with the defaults trains with the defaults.
DEFAULT_PRESET = "tiny"

# kt-export --shortlist-data: the pairs a shortlist is learned from.
SHORTLIST_SENTENCES = 1_000_000
# kt-import --format.
IMPORT_FORMATS = ("auto", "marian", "huggingface")


def command_description(module: str) -> str:
    """A command's `--help` description: the first paragraph of its module's docstring (read
    from the source, the module not imported), its lines joined."""
    path = importlib.util.find_spec(module).origin
    with open(path, encoding="utf-8") as source:
        docstring = ast.get_docstring(ast.parse(source.read()))
    return " ".join(docstring.strip().split("\n\n")[0].split())


def command_parser(prog: str, command: str, **kwargs) -> argparse.ArgumentParser:
    """An empty parser for `prog`, described by the docstring of `trainers.<command>`."""
    return argparse.ArgumentParser(prog=prog, description=command_description(
        f"trainers.{command}"), **kwargs)


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """`--preset` (default `DEFAULT_PRESET`), `--config FILE.json` and repeated `--set
    key=value` (applied in that order)."""
    parser.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS),
                        help=f"named recipe: architecture, training and search settings "
                             f"(default: {DEFAULT_PRESET})")
    parser.add_argument("--config", metavar="FILE.json",
                        help="JSON object of recipe fields overriding the preset")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override one recipe field (repeatable)")


def add_weights_argument(parser: argparse.ArgumentParser, run_directory_only: bool) -> None:
    """`--weights FILE`, with its default (`RunDir.default_weights`) in its help;
    `run_directory_only`: the command also takes exports, which have no weights to choose."""
    parser.add_argument("--weights", metavar="FILE",
                        help=("with a run directory: " if run_directory_only else "")
                        + "a .weights.h5 file (default: the weights the run's result.json "
                        "chose, the better on dev of the averaged and the final ones; without "
                        "one, the averaged weights, else the final weights, else the newest "
                        "checkpoint)")


def add_target_language_argument(parser: argparse.ArgumentParser) -> None:
    """`--target-language LANG`: what a model of several target languages translates into;
    `--source-language LANG`: what a model that reads it (NLLB-200, M2M-100) translates from."""
    parser.add_argument("--target-language", metavar="LANG",
                        help="the language to translate into (e.g. de): required by a model "
                             "trained on several language pairs (kt-train --pair) and its "
                             "exports; a run imported from a multi-target OPUS-MT model, and "
                             "its exports, take it as its >>LANG<< token (e.g. fra), first in "
                             "each line in place of a line's own, or go without it (each line "
                             "as it is); an imported NLLB-200 or M2M-100 model takes its "
                             "codes (eng_Latn, or en) or an unambiguous ISO 639-3 code (eng); "
                             "refused by other models")
    parser.add_argument("--source-language", metavar="LANG",
                        help="the language translated from: required by an imported NLLB-200 "
                             "or M2M-100 model and its exports (e.g. eng_Latn, or eng; en for "
                             "M2M-100), refused by other models")


def add_tfds_language_arguments(parser: argparse.ArgumentParser) -> None:
    """`--tfds-source-language` and `--tfds-target-language` (on `parser` or one of its
    argument groups): the tensorflow-datasets features translated from and into, parsed as
    `source_lang` and `target_lang` (`load_tfds`'s names, and the keys a run's `run.json`
    records); `--source-lang`/`--target-lang`, their earlier spelling, are still read."""
    for side, default in (("source", "en"), ("target", "de")):
        parser.add_argument(f"--tfds-{side}-language", dest=f"{side}_lang", default=default,
                            metavar="LANG",
                            help=f"tensorflow-datasets {side} language (default: {default})")
        parser.add_argument(f"--{side}-lang", dest=f"{side}_lang", default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)


def add_ensemble_argument(parser: argparse.ArgumentParser) -> None:
    """`--ensemble RUN_DIR ...`: runs whose models decode together with the main one."""
    parser.add_argument("--ensemble", nargs="+", default=[], metavar="RUN_DIR",
                        help="further run directories (same vocabulary) whose models' "
                             "probabilities the search averages with the run's (their "
                             "default weights)")


# Each search setting's one command-line name, and the spelling earlier versions accepted.
SEARCH_FLAGS = {"beam_size": ("--beam-size", None),
                 "length_penalty": ("--length-penalty", "--alpha"),
                 "max_decode_extra": ("--max-decode-extra", "--extra-length"),
                 "temperature": ("--temperature", None),
                 "top_k": ("--top-k", None),
                 "top_p": ("--top-p", None),
                 "sampling_seed": ("--seed", None)}


def add_search_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """`--beam-size`, `--length-penalty` and `--max-decode-extra`, and sampling's
    `--temperature`, `--top-k`, `--top-p` and `--seed` (`SearchSettings`), each defaulting to
    the run's recipe's; `what` says what they apply to."""
    types = {"beam_size": int, "length_penalty": float, "max_decode_extra": int,
             "temperature": float, "top_k": int, "top_p": float, "sampling_seed": int}
    helps = {"beam_size": "beam size (1 = greedy)",
             "length_penalty": "length penalty alpha",
             "max_decode_extra": "output tokens allowed beyond the source length",
             "temperature": "sample instead of searching (as do --top-k and --top-p), from "
                            "the softmax at this temperature",
             "top_k": "sample among the K most likely tokens (0: all)",
             "top_p": "sample within the most likely tokens of this total probability",
             "sampling_seed": "sampling seed (the same seed gives a sentence the same "
                              "translation in any batch)"}
    for field, (flag, old_flag) in SEARCH_FLAGS.items():
        parser.add_argument(flag, dest=field, type=types[field],
                            help=f"{helps[field]} {what} (default: the recipe's {field})")
        if old_flag:
            parser.add_argument(old_flag, dest=field, type=types[field], help=argparse.SUPPRESS)


def given_search_flags(values: Mapping[str, Any]) -> dict[str, Any]:
    """The `add_search_arguments` options given among a parsed command line's `values` (its
    options by name), by their `SearchSettings` field (a flag not given: the recipe's)."""
    return {field: values[field] for field in SEARCH_FLAGS if values[field] is not None}


def train_parser() -> argparse.ArgumentParser:
    """`kt-train`'s options."""
    parser = command_parser("kt-train", "train")
    add_recipe_arguments(parser)
    parser.add_argument("--task", choices=("translation", "parsing"), default="translation",
                        help="translation (default) or parsing: sources are sentences, targets "
                             "linearized trees (prepare_parsing's files); the final test "
                             "evaluation reports bracket F1 against --test-tree, while the "
                             "periodic dev evaluation stays BLEU of the linearized trees, "
                             "a cheap proxy")
    data = parser.add_argument_group("data (default: the generated demo corpus)")
    for split in ("train", "dev", "test"):
        for side in ("src", "tgt"):
            data.add_argument(f"--{split}-{side}", metavar="FILE",
                              action="append" if split == "train" else "store",
                              help=f"{split} {'source' if side == 'src' else 'target'} "
                                   "sentences, one a line (plain or .gz)"
                                   + ("; repeat --train-src/--train-tgt for several corpora "
                                      "(e.g. the originals and a teacher's translations)"
                                      if split == "train" else ""))
    data.add_argument("--alignments", metavar="FILE", action="append",
                      help="guided alignment: the word alignments of --train-src/--train-tgt, "
                           "a pair a line in Pharaoh's i-j format (eflomal's or fast_align's "
                           "output; one file per --train-src): one encoder-decoder attention "
                           "head (the second-to-last decoder layer's first) is trained toward "
                           "them and then aligns for markup (docs/documents.md)")
    data.add_argument("--alignment-weight", type=float, default=0.05, metavar="W",
                      help="with --alignments: the alignment loss's weight (default: 0.05)")
    data.add_argument("--test-tree", metavar="FILE",
                      help="--task parsing: gold trees of --test-src, one per sentence "
                           "(required with --test-src)")
    data.add_argument("--tfds", metavar="NAME", help="tensorflow-datasets translation "
                      "builder, e.g. wmt14_translate/de-en")
    add_tfds_language_arguments(data)
    data.add_argument("--tfds-data-dir", help="tensorflow-datasets data directory")
    data.add_argument("--tfds-splits", default="train,validation,test",
                      help="tfds train,dev,test split names (default: train,validation,test)")
    data.add_argument("--prepared", metavar="DIR",
                      help="train on storage written by kt-prepare (its vocabulary) instead of "
                           "--train-src/--train-tgt; dev and test files as usual")
    data.add_argument("--vocab-sentences", type=int, default=2_000_000,
                      help="sentences sampled to learn the subword vocabulary (default: "
                           "2,000,000)")
    add_pair_arguments(parser)
    run = parser.add_argument_group("run")
    run.add_argument("--init-from", metavar="RUN_DIR",
                     help="fine-tune: start from this run's model (one kt-train or kt-import "
                          "wrote: its architecture, tokenizer and chosen weights) with the "
                          "fine-tuning schedule (Recipe.for_fine_tuning: 200 warmup steps to "
                          "a peak rate of 1e-4); --set and --config may change training and "
                          "search fields and dropout, nothing else of the model")
    run.add_argument("--lora-rank", type=int, metavar="R",
                     help="with --init-from: train LoRA adapters of rank R only: each "
                          "attention and feed-forward projection multiplies by W + "
                          "(ALPHA/R) A B, W frozen, the adapters A and B trained, every other "
                          "weight frozen; the final, averaged and chosen weights are written "
                          "merged, as plain weights (default: none, every weight is "
                          "fine-tuned)")
    run.add_argument("--lora-alpha", type=float, metavar="ALPHA",
                     help="with --lora-rank: the adapters' scale is ALPHA/R (default: R, a "
                          "scale of 1)")
    run.add_argument("--output-dir", default=os.path.join("runs", "demo"),
                     help="run directory: config, vocab, checkpoints, logs (default: runs/demo)")
    run.add_argument("--steps", type=int, help=f"total optimizer steps (default: "
                     f"{DEFAULT_STEPS} unless --epochs or --max-minutes is given)")
    run.add_argument("--epochs", type=float, help="passes over the training data instead")
    run.add_argument("--max-minutes", type=float, help="stop after this much wall clock")
    run.add_argument("--cpu-replicas", type=int, default=0,
                     help="split the CPU into N logical devices and mirror over them "
                          "(default: 0, no split)")
    run.add_argument("--seed", type=int, default=0, help="data order and initialization seed "
                     "(default: 0)")
    run.add_argument("--precision", choices=PRECISION_CHOICES, default="auto",
                     help="Keras dtype policy (default: auto = a reduced precision where its "
                          "matmuls measure at least 1.25x float32's on this machine, else "
                          "float32; the figures are printed and kept in the run directory); "
                          "exports are float32")
    run.add_argument("--kernels", choices=IMPLEMENTATION_CHOICES,
                     default=os.environ.get(IMPLEMENTATION_VARIABLE, "auto"),
                     help="fast (the package's speed tricks), reference (their plain "
                          "Keras/TensorFlow twins), or auto (the faster of the two measured on "
                          "this machine at the model's sizes); default: $KT_KERNELS, else auto")
    run.add_argument("--jit-compile", action="store_true",
                     help="XLA-compile the train step (measured slower on CPU; may help on GPU)")
    run.add_argument("--steps-per-execution", type=int, default=1,
                     help="training steps per call of the compiled train function (Keras "
                          "fetches the logs to the host once per call: on a GPU, 10-100 hide "
                          "that wait); --steps, --eval-every and --backup-every must be "
                          "multiples of it (default: 1)")
    run.add_argument("--eval-every", type=int, default=250,
                     help="steps between dev BLEU evaluations and attention images "
                          "(default: 250)")
    run.add_argument("--eval-every-minutes", type=float,
                     help="also evaluate at the first backup interval's end this many minutes "
                          "after the previous evaluation (default: by steps only)")
    run.add_argument("--eval-sentences", type=int, default=200,
                     help="dev sentences translated at each evaluation (default: 200)")
    run.add_argument("--eval-beam-size", type=int, default=1,
                     help="beam size of the periodic dev evaluation and of the final dev "
                          "scoring of the averaged and final weights (default: 1, greedy)")
    run.add_argument("--attention-sentences", type=int, default=2,
                     help="dev pairs drawn as attention heatmaps at each evaluation "
                          "(default: 2)")
    run.add_argument("--checkpoint-every-steps", type=int,
                     help="also checkpoint every N steps (default: by minutes only; both "
                          "intervals fire)")
    run.add_argument("--checkpoint-every-minutes", type=float, default=10.0,
                     help="checkpoint interval in minutes, always on (default: 10, as in the "
                          "paper)")
    run.add_argument("--keep-checkpoints", type=int,
                     help="newest checkpoints kept (default: 5, or the recipe's average_last "
                          "when that is more)")
    run.add_argument("--backup-every", type=int, default=100,
                     help="steps between backups a killed run resumes from (default: 100)")
    run.add_argument("--backup-every-minutes", type=float,
                     help="also back up at the first evaluation or backup interval's end this "
                          "many minutes after the previous backup (default: by steps only)")
    run.add_argument("--log-batches", action="store_true",
                     help="append each training batch's step and a digest of its ids to "
                          "batches.tsv in the run directory (to audit resumed runs)")
    run.add_argument("--log-every-steps", type=int, default=50,
                     help="steps between TensorBoard's training scalars (loss, token accuracy, "
                          "perplexity, learning rate, tokens/s); 0: at evaluations only "
                          "(default: 50)")
    run.add_argument("--progress-seconds", type=float, default=30.0,
                     help="seconds between progress lines (step, loss, tok/s, ETA; default 30)")
    run.add_argument("--verbose", action="store_true",
                     help="keep TensorFlow's C++ start-up and log lines (hidden by default)")
    out = parser.add_argument_group("after training")
    out.add_argument("--test-beam-size", type=int, help="beam of the final test evaluation "
                     "(default: the recipe's beam_size)")
    out.add_argument("--export-name", help="SavedModel name (default: the output dir's name "
                     "+ '-staging', so that a finished run never writes a new version into a "
                     "served model's directory; serve it through kt-export --name NAME)")
    out.add_argument("--base-dir", "--export-dir", dest="export_dir", default="saved_models",
                     help="root of the TF Serving model tree, as kt-export's --base-dir "
                          "(default: saved_models)")
    out.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    return parser


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """`--pair`, `--dev-pair`, `--test-pair`, `--pair-temperature` and `--language-token`:
    several language pairs in one model."""
    pairs = parser.add_argument_group(
        "several language pairs in one model (instead of --train-src ...; docs/training.md)")
    for flag, split in (("--pair", "training"), ("--dev-pair", "dev"), ("--test-pair", "test")):
        pairs.add_argument(flag, nargs=3, action="append", default=[],
                           metavar=("SRC-TGT", "SRC_FILE", "TGT_FILE"),
                           help=f"a language pair's {split} sentences (plain or .gz), e.g. "
                                f"{flag} en-de {split[:5]}.en.gz {split[:5]}.de.gz; repeat it "
                                "for each pair"
                                + {"--pair": "", "--dev-pair": " (one per --pair)",
                                   "--test-pair": " (optional)"}[flag])
    pairs.add_argument("--pair-temperature", type=float,
                       help="draw each batch's pair with probability proportional to its "
                            "batches per epoch to the power 1/T: 1 in proportion to size, "
                            "inf uniformly (default: 1)")
    pairs.add_argument("--language-token", choices=PLACEMENTS,
                       help="where the target-language token (<2de>) goes: first in the "
                            "source (Johnson et al. 2017) or first in the target, after BOS "
                            "(default: source)")


def average_checkpoints_parser() -> argparse.ArgumentParser:
    """`kt-average-checkpoints`'s options."""
    parser = command_parser("kt-average-checkpoints", "average_checkpoints")
    parser.add_argument("run_dir", help="the directory kt-train wrote")
    parser.add_argument("--last", type=int,
                        help="how many of the newest checkpoints, 2 or more (default: the "
                             "run's recipe's average_last, or as many as were kept if fewer; "
                             "paper: 5 base, 20 big)")
    parser.add_argument("--output", help="default: <run_dir>/averaged.weights.h5")
    return parser


def evaluate_parser() -> argparse.ArgumentParser:
    """`kt-evaluate`'s options."""
    parser = command_parser("kt-evaluate", "evaluate")
    parser.add_argument("run_dir", help="the directory kt-train wrote, or an export")
    parser.add_argument("--task", choices=("translation", "parsing"), default="translation",
                        help="translation (BLEU, default) or parsing (bracket F1, needs --trees)")
    add_weights_argument(parser, run_directory_only=False)
    parser.add_argument("--src", help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--ref", help="reference translations, line-aligned with --src")
    parser.add_argument("--trees", help="--task parsing: gold trees, one per --src sentence")
    parser.add_argument("--output-trees", help="--task parsing: the parsed trees, one a line "
                        "(default: the --hypotheses path with .parsed.tree for .hyp)")
    parser.add_argument("--tfds", metavar="NAME", help="tensorflow-datasets builder instead")
    parser.add_argument("--tfds-split", dest="split", default="test",
                        help="its split (default: test)")
    parser.add_argument("--split", dest="split", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)  # the earlier spelling
    add_tfds_language_arguments(parser)
    parser.add_argument("--tfds-data-dir", help="tensorflow-datasets data directory")
    parser.add_argument("--tokenized-ref", help="lowercased tokenized references (Multi30k "
                        "tok/*.lc.norm.tok.de) for the tokenized BLEU")
    add_target_language_argument(parser)
    add_search_arguments(parser, "of the search")
    add_ensemble_argument(parser)
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentences per batch (default: 64)")
    parser.add_argument("--hypotheses", help="output file (default: <run_dir>/<src name>.hyp, "
                        "or <src name>.<language>.hyp with --target-language; an export: "
                        "required)")
    parser.add_argument("--threads", type=int, default=2,
                        help="a LiteRT export's interpreter threads (default: 2)")
    return parser


def export_parser() -> argparse.ArgumentParser:
    """`kt-export`'s options."""
    parser = command_parser("kt-export", "export")
    parser.add_argument("model", nargs="?", help="a .keras file, a directory holding one (the "
                        "newest is used), or a kt-train run directory")
    parser.add_argument("vocabulary", nargs="?", help="directory with the tokenizer's files (a "
                        "run's vocab/; default: the run directory's own)")
    parser.add_argument("--name", help="model name: <base-dir>/<name>/<version> (required)")
    parser.add_argument("--describe", metavar="EXPORT",
                        help="print where the export EXPORT (NAME/N, or NAME for its newest "
                             "version) came from, and write nothing")
    parser.add_argument("--base-dir", "--export-dir", dest="base_dir", default="saved_models",
                        help="root of the TF Serving model tree, as kt-train's --base-dir "
                             "(default: saved_models)")
    add_weights_argument(parser, run_directory_only=True)
    parser.add_argument("--precision", choices=(*SERVING_DTYPES, "auto"), default="float32",
                        help="dtype the export stores and computes in (default: float32; auto: "
                             "bfloat16 where its matmuls measure at least 1.25x float32's "
                             "here at decoding sizes)")
    parser.add_argument("--shortlist", metavar="FREQUENT,PER_SOURCE",
                        help="score only a shortlist of target pieces per batch: the FREQUENT "
                             "most common plus PER_SOURCE per source piece (e.g. 1000,20)")
    parser.add_argument("--shortlist-data", nargs=2, metavar=("SRC", "TGT"),
                        help="parallel text the shortlist is learned from (default: a run "
                             "directory's training files); the first "
                             f"{SHORTLIST_SENTENCES:,} pairs are used")
    parser.add_argument("--format", choices=("savedmodel", "ctranslate2", "litert"),
                        default="savedmodel",
                        help="savedmodel, a TF Serving SavedModel (default: savedmodel); "
                             "ctranslate2, a CTranslate2 model directory (pip install -e "
                             "'.[ctranslate2]'); or litert, a LiteRT (TFLite) model for "
                             "devices")
    parser.add_argument("--quantization",
                        choices=sorted(set(CTRANSLATE2_QUANTIZATIONS) | set(LITERT_QUANTIZATIONS)),
                        help="--format ctranslate2: how CTranslate2 stores the weights "
                             f"({', '.join(CTRANSLATE2_QUANTIZATIONS)}; default: int8); "
                             f"--format litert: {', '.join(LITERT_QUANTIZATIONS)} (default: "
                             "float32)")
    parser.add_argument("--source-length", type=int, metavar="PIECES",
                        help="--format litert: every shape fixed, the source padded to this "
                             "many ids (its pieces and EOS; longer sources are cut and "
                             "named), as LiteRT.js and the browser page (web/) need "
                             "(default: any length up to the model's max_length)")
    parser.add_argument("--xla", action="store_true",
                        help="save the search as one XLA-compiled function (lower latency at "
                             "small batches; TF Serving on CPU needs "
                             "--xla_cpu_compilation_enabled=true)")
    parser.add_argument("--warmup-max-width", type=int, default=WARMUP_MAX_WIDTH,
                        metavar="PIECES",
                        help="--xla: the warm-up requests cover each padded source width (a "
                             "multiple of 16) up to this many subword pieces (default: "
                             f"{WARMUP_MAX_WIDTH}); longer inputs compile at their first "
                             "request")
    add_search_arguments(parser, "fixed in the export")
    return parser


def import_model_parser() -> argparse.ArgumentParser:
    """`kt-import`'s options."""
    parser = command_parser("kt-import", "import_model",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("folder", help="the model's release folder")
    parser.add_argument("--output-dir", required=True,
                        help="the run directory to create (must not exist)")
    parser.add_argument("--format", choices=IMPORT_FORMATS, default="auto",
                        help="the folder's layout (auto: Hugging Face's when it holds a "
                             "config.json, else Marian's)")
    return parser


def moses_form_parser() -> argparse.ArgumentParser:
    """`python -m trainers moses_form`'s options."""
    parser = command_parser("moses_form", "moses_form")
    parser.add_argument("--src", required=True, help="source sentences (plain or .gz)")
    parser.add_argument("--tgt", required=True, help="their translations, line-aligned")
    parser.add_argument("--langs", nargs=2, required=True, metavar=("SRC_LANG", "TGT_LANG"),
                        help="the two languages (Moses tokenizer rules), e.g. en de")
    parser.add_argument("--output-prefix", required=True,
                        help="writes <prefix>.<src_lang> and <prefix>.<tgt_lang>")
    return parser


def plot_attention_parser() -> argparse.ArgumentParser:
    """`kt-plot-attention`'s options."""
    parser = command_parser("kt-plot-attention", "plot_attention")
    parser.add_argument("run_dir", help="the directory kt-train wrote")
    parser.add_argument("source", help="source sentence")
    parser.add_argument("--target", help="target sentence (default: the model's translation)")
    add_weights_argument(parser, run_directory_only=False)
    parser.add_argument("--out", default="attention_plots",
                        help="output directory (default: attention_plots)")
    return parser


def align_parser() -> argparse.ArgumentParser:
    """`kt-align`'s options."""
    parser = command_parser("kt-align", "align")
    parser.add_argument("run_dir", help="the directory kt-train or kt-import wrote")
    parser.add_argument("--src", metavar="FILE", required=True,
                        help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--tgt", metavar="FILE", required=True,
                        help="their translations, line-aligned")
    parser.add_argument("--alignments", metavar="FILE", required=True,
                        help="their word alignments, Pharaoh's i-j pairs a line (e.g. "
                             "eflomal's, symmetrized), words split at whitespace")
    add_weights_argument(parser, run_directory_only=False)
    parser.add_argument("--record", action="store_true",
                        help="write the choice of lowest alignment error to the run's "
                             "alignment.json, which its translations and exports then use")
    return parser


def prepare_parser() -> argparse.ArgumentParser:
    """`kt-prepare`'s options."""
    parser = command_parser("kt-prepare", "prepare")
    add_recipe_arguments(parser)
    parser.add_argument("--train-src", metavar="FILE", action="append",
                        help="source sentences, one a line (plain or .gz); repeat "
                        "--train-src/--train-tgt for several corpora, counted apart in the "
                        "manifest")
    parser.add_argument("--train-tgt", metavar="FILE", action="append",
                        help="their translations, line-aligned")
    parser.add_argument("--tfds", metavar="NAME", help="a tensorflow-datasets translation "
                        "builder instead, e.g. wmt14_translate/de-en")
    parser.add_argument("--tfds-split", default="train", help="its split (default: train)")
    add_tfds_language_arguments(parser)
    parser.add_argument("--tfds-data-dir", help="tensorflow-datasets data directory")
    parser.add_argument("--output-dir", required=True, help="where the storage goes")
    parser.add_argument("--vocab", metavar="DIR", help="use the spm.model in DIR (e.g. a run's "
                        "vocab/) instead of learning one of the recipe's vocab_size")
    parser.add_argument("--vocab-sentences", type=int, default=2_000_000,
                        help="sentences sampled to learn the vocabulary (default: 2,000,000)")
    parser.add_argument("--shard-pairs", type=int, default=DEFAULT_SHARD_PAIRS,
                        help=f"pairs per shard (default: {DEFAULT_SHARD_PAIRS:,})")
    parser.add_argument("--seed", type=int, default=0,
                        help="vocabulary sample and shard assignment seed (default: 0)")
    parser.add_argument("--threads", type=int, help="tokenizer threads (default: every core)")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's C++ start-up lines")
    return parser


def prepare_parsing_parser() -> argparse.ArgumentParser:
    """`python -m trainers prepare_parsing`'s options."""
    parser = command_parser("prepare_parsing", "prepare_parsing")
    parser.add_argument("--treebank", help="folder of wsj_*.mrg files (default: the shared "
                                           "data's treebank/, $KT_SHARED_DATA or ../shared/data)")
    parser.add_argument("--output-dir", required=True, help="where the split files go")
    parser.add_argument("--leaves", choices=LEAVES, default="placeholder",
                        help="what stands for each word in the targets: XX (placeholder, as "
                             "Vinyals & Kaiser et al.; default) or the words themselves")
    return parser


def score_parser() -> argparse.ArgumentParser:
    """`kt-score`'s options."""
    parser = command_parser("kt-score", "score")
    parser.add_argument("run_dir", help="the directory kt-train (or kt-import) wrote")
    parser.add_argument("--src", required=True, help="source sentences, one a line (or .gz)")
    parser.add_argument("--tgt", required=True,
                        help="their translations, line-aligned with --src (or .gz)")
    parser.add_argument("--output", help="the JSON lines (default: standard output)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="pairs scored at once (default: 32)")
    add_weights_argument(parser, run_directory_only=False)
    add_target_language_argument(parser)
    return parser


def translate_parser() -> argparse.ArgumentParser:
    """`kt-translate`'s options."""
    parser = command_parser("kt-translate", "translate")
    parser.add_argument("model", help="an export (NAME/ for its newest version, or NAME/N/) or "
                        "a kt-train run directory")
    parser.add_argument("inputs", nargs="*", default=["-"],
                        help="text files, one sentence a line, plain or .gz (default: - = stdin)")
    parser.add_argument("--output", nargs="+", metavar="FILE",
                        help="one output file per input (default: standard output)")
    parser.add_argument("--nbest", type=int, default=0, metavar="K",
                        help="K best translations per line as INDEX ||| TEXT ||| SCORE "
                        "(default: 0, the best translation alone)")
    parser.add_argument("--prefix", nargs="+", metavar="FILE",
                        help="one file per input: line N is the start forced on the "
                        "translation of input line N")
    parser.add_argument("--terms", metavar="GLOSSARY",
                        help="lines 'source phrase ||| target phrase': a translation contains "
                        "the target phrase wherever its line contains the source phrase")
    parser.add_argument("--constraints", nargs="+", metavar="FILE",
                        help="one file per input: line N holds the target phrases (separated "
                        "by tabs) the translation of input line N must contain")
    parser.add_argument("--scores", nargs="+", metavar="FILE",
                        help="one file per input: line N is a JSON object of the confidence "
                        "of translation N (sentence and word scores)")
    parser.add_argument("--format", choices=["lines", "text", "html", "markdown"],
                        help="lines: one sentence a line, as it is; text: lines of any number "
                        "of sentences, split into sentences (a sentence longer than the model "
                        "takes is translated in parts); html, markdown: documents, their "
                        "markup kept and inline tags placed by word alignment (default: html "
                        "for .html/.htm, markdown for .md/.markdown, else lines)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentences per batch (default: 64)")
    parser.add_argument("--threads", type=int, default=2,
                        help="a LiteRT export's interpreter threads (default: 2)")
    parser.add_argument("--batch-tokens", type=int, default=6000,
                        help="at most this many padded words per batch (default: 6000)")
    add_weights_argument(parser, run_directory_only=True)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_target_language_argument(parser)
    add_search_arguments(parser, "(run directories only: an export's are fixed)")
    add_ensemble_argument(parser)
    return parser


def translate_corpus_parser() -> argparse.ArgumentParser:
    """`kt-translate-corpus`'s options."""
    parser = command_parser("kt-translate-corpus", "translate_corpus")
    parser.add_argument("model", help="a kt-train run directory or an export")
    parser.add_argument("input", help="the source side of the corpus, plain or .gz")
    parser.add_argument("--output", required=True, metavar="FILE",
                        help="the translation, line for line (parts in FILE.parts/)")
    parser.add_argument("--shard", default="1/1", metavar="I/N",
                        help="translate shard I of N (1-based; default 1/1: every chunk)")
    parser.add_argument("--chunk-lines", type=int, default=10_000,
                        help="input lines per chunk, the unit of resumption (default: 10000)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentences per batch (default: 64)")
    parser.add_argument("--batch-tokens", type=int, default=6000,
                        help="at most this many padded words per batch (default: 6000)")
    parser.add_argument("--threads", type=int, default=2,
                        help="a LiteRT export's interpreter threads (default: 2)")
    parser.add_argument("--closest-to-reference", metavar="REF",
                        help="reference translations, line-aligned with the input: keep the "
                             "beam's hypothesis with the highest sentence BLEU against each")
    add_weights_argument(parser, run_directory_only=True)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--progress-seconds", type=float, default=30.0,
                        help="seconds between progress lines (default: 30)")
    add_target_language_argument(parser)
    add_search_arguments(parser, "(run directories only: an export's are fixed)")
    add_ensemble_argument(parser)
    return parser


# Each launcher command's parser (`trainers.launch.COMMANDS`).
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "train": train_parser, "prepare": prepare_parser, "evaluate": evaluate_parser,
    "average_checkpoints": average_checkpoints_parser, "export": export_parser,
    "translate": translate_parser, "translate_corpus": translate_corpus_parser,
    "prepare_parsing": prepare_parsing_parser, "moses_form": moses_form_parser,
    "plot_attention": plot_attention_parser, "import_model": import_model_parser,
    "score": score_parser, "align": align_parser}
