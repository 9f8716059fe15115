"""Parallel text from a tensorflow-datasets translation builder, in a chosen direction."""
from __future__ import annotations

import difflib
from collections.abc import Iterator

import tensorflow_datasets as tfds


def _builder(name: str, data_dir: str | None) -> tfds.core.DatasetBuilder:
    """Return the builder for ``name`` ("dataset/config"), or a ValueError naming it."""
    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        dataset = name.split("/")[0]
        close = difflib.get_close_matches(dataset, tfds.list_builders(), n=5)
        hint = f"; did you mean one of {close}?" if close else ""
        raise ValueError(f"unknown tensorflow-datasets name {dataset!r}{hint}") from None
    except ValueError as error:
        first_line = str(error).splitlines()[0]
        raise ValueError(f"cannot build tensorflow-datasets {name!r}: {first_line}") from None


def tfds_pairs(
    name: str,
    split: str,
    source_lang: str,
    target_lang: str,
    data_dir: str | None = None,
    download: bool = True,
) -> tuple[int, Iterator[tuple[str, str]]]:
    """The number of pairs of the split `split` (e.g. "train" or "validation") of the translation
    dataset `name` and a stream of them, as
    `(pairs in the split, an iterator of (source, target) strings)`, stripped (empty sides
    included), read as they are consumed.

    `name` is the builder and its language-pair config, e.g. "wmt14_translate/de-en" or
    "ted_hrlr_translate/pt_to_en"; `source_lang` the language translated from (a feature of the
    dataset), `target_lang` the language translated into; `data_dir` tensorflow-datasets' data
    directory. `download` prepares the dataset if needed; False requires it prepared in `data_dir`.
    A ValueError names the dataset and the reason for an unknown name, language or split, or a
    download or preparation that failed.
    """
    builder = _builder(name, data_dir)
    languages = sorted(builder.info.features.keys())
    for argument, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang not in languages:
            raise ValueError(f"{argument}={lang!r} is not a language of {name!r}: {languages}")
    if source_lang == target_lang:
        raise ValueError(f"source_lang and target_lang are both {source_lang!r}")
    if download:
        try:
            builder.download_and_prepare()
        except (OSError, tfds.download.DownloadError) as error:  # network or disk
            raise ValueError(
                f"cannot download and prepare tensorflow-datasets {name!r} into "
                f"{builder.data_dir}: {str(error).splitlines()[0]}; check the network "
                "connection and the data directory (a dataset prepared elsewhere is read "
                "from its data_dir without downloading)") from error
    try:
        dataset = builder.as_dataset(split=split)
    except ValueError as error:
        raise ValueError(f"split {split!r} of {name!r}: {str(error).splitlines()[0]}") from None
    count = int(dataset.cardinality())
    if count < 0:  # not recorded by the builder: counted in a pass over the split
        count = int(dataset.reduce(0, lambda total, _: total + 1))
    pairs = ((example[source_lang].decode("utf-8").strip(),
              example[target_lang].decode("utf-8").strip())
             for example in tfds.as_numpy(dataset))
    return count, pairs


def load_tfds(name: str, split: str, source_lang: str, target_lang: str,
              data_dir: str | None = None, download: bool = True) -> tuple[list[str], list[str]]:
    """Return (sources, targets) of ``split`` of the translation dataset ``name`` (the
    arguments of ``tfds_pairs``), pairs with an empty side dropped, held in memory (for
    dev and test splits; training data goes through ``prepare``)."""
    sources, targets = [], []
    for source, target in tfds_pairs(name, split, source_lang, target_lang, data_dir,
                                     download)[1]:
        if source and target:
            sources.append(source)
            targets.append(target)
    return sources, targets
