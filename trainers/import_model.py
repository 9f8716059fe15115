"""`kt-import`: a released Marian (OPUS-MT), NLLB-200 or M2M-100 model folder as a run directory
every command takes. Its manual: docs/importing.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line's options (`argv`: default `sys.argv[1:]`)."""
    from trainers.arguments import import_model_parser  # this module imports nothing heavy

    parser = import_model_parser()
    args = parser.parse_args(argv)
    if not os.path.isdir(args.folder):
        parser.error(f"folder: {args.folder!r} " + ("is not a folder" if os.path.exists(
            args.folder) else "does not exist"))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns its exit status (2 when the model is refused)."""
    args = parse_args(argv)
    from keras_transformer.importing.huggingface import read_huggingface_folder
    from keras_transformer.importing.imported_model import ImportFormatError
    from keras_transformer.importing.marian import read_marian_folder
    from keras_transformer.importing.run_directory import write_imported_run

    source_format = args.format
    if source_format == "auto":
        source_format = ("huggingface" if os.path.isfile(os.path.join(args.folder, "config.json"))
                         else "marian")
    read = {"marian": read_marian_folder, "huggingface": read_huggingface_folder}[source_format]
    try:
        imported = read(args.folder)
        run = write_imported_run(imported, args.output_dir, os.path.abspath(args.folder),
                                 source_format)
    except (ImportFormatError, ValueError) as error:
        print(f"kt-import: {error}", file=sys.stderr)
        return 2
    config = imported.config
    print(f"kt-import: {args.folder} -> {run.root} ({config.encoder_depth}+"
          f"{config.decoder_depth} layers, d_model {config.d_model}, {config.norm}-norm, "
          f"{config.activation}, {config.vocab_size} source / {config.target_vocab_size} target "
          "ids)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
