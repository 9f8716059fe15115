"""Files promised to survive reach the disk before the rename that publishes them: token shards
before their manifest, a checkpoint before its name, an export's every file before its version
directory (without, a power loss can leave a manifest over zero-filled shards that pass the
size checks)."""
import os
from pathlib import Path

import pytest

import keras_transformer as kt
from keras_transformer.data import SubwordTokenizer, write_demo_corpus
from keras_transformer.data.prepare import prepare, text_file_source
from keras_transformer.serving.export import export_translator
from keras_transformer.training.checkpoints import save_weights_atomic

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                reason="names a flushed descriptor through /proc")


@pytest.fixture
def events(monkeypatch) -> list[tuple[str, str]]:
    """Records ("fsync", path) and ("rename", destination) in the order they happen."""
    recorded: list[tuple[str, str]] = []
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

    def fsync(descriptor):
        recorded.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    def rename_with(real):
        def rename(source, destination, *args, **kwargs):
            recorded.append(("rename", os.fspath(destination)))
            return real(source, destination, *args, **kwargs)
        return rename

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", rename_with(real_replace))
    monkeypatch.setattr(os, "rename", rename_with(real_rename))
    return recorded


def synced_before(events: list[tuple[str, str]], destination: Path) -> set[str]:
    """The paths flushed before the rename onto `destination`."""
    index = events.index(("rename", os.fspath(destination)))
    return {path for kind, path in events[:index] if kind == "fsync"}


def test_token_shards_reach_the_disk_before_their_manifest(events, demo_vocab, tmp_path):
    paths = write_demo_corpus(tmp_path / "demo")["dev"]
    storage = prepare(text_file_source(*paths), tmp_path / "prepared",
                      SubwordTokenizer.load(demo_vocab), shard_pairs=200)
    shards = {os.fspath(path) for path in (tmp_path / "prepared").glob("shard-*")}
    assert len(shards) == 2 * len(storage.shards) > 2
    assert shards <= synced_before(events, tmp_path / "prepared" / "manifest.json")


def test_a_checkpoint_reaches_the_disk_before_its_name(events, tmp_path):
    model = kt.Transformer(kt.TransformerConfig.preset("tiny", vocab_size=40))
    path = save_weights_atomic(model, tmp_path / "ckpt-00000001.weights.h5")
    flushed = synced_before(events, path)
    assert any(Path(name).parent == tmp_path and name.endswith(".weights.h5")
               for name in flushed)


@pytest.mark.slow
def test_every_file_of_an_export_reaches_the_disk_before_its_version(events, demo_tokenizer,
                                                                     tmp_path):
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=demo_tokenizer.vocab_size, num_layers=1, max_length=16))
    version = Path(export_translator(model, demo_tokenizer, "durable", tmp_path,
                                     kt.SearchSettings(beam_size=1, max_decode_extra=2)))
    flushed = {Path(name).name for name in synced_before(events, version)}
    written = {path.name for path in version.rglob("*") if path.is_file()}
    assert {"saved_model.pb", "spm.model"} <= written <= flushed
