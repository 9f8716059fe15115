"""`kt-evaluate --task parsing` and `kt-train --task parsing` on a handful of hand-made trees."""

import pytest

from keras_transformer.parsing.evaluate import parse_scores, read_gold_trees
from keras_transformer.parsing.linearize import linearize, source_text
from keras_transformer.parsing.trees import read_tree, read_tree_file
from trainers import evaluate, train
from helpers import final_json

TREES = [
    "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))",
    "(TOP (S (NP (PRP She)) (VP (VBZ reads) (NP (NNS books))) (. .)))",
    "(TOP (S (NP (DT A) (JJ big) (NN dog)) (VP (VBD barked)) (. .)))",
    "(TOP (S (NP (NNP John)) (VP (VBD gave) (NP (PRP her)) (NP (DT a) (NN gift))) (. .)))",
    "(TOP (S (NP (DT The) (NNS birds)) (VP (VBP sing) (ADVP (RB loudly))) (. .)))",
    "(TOP (S (NP (PRP We)) (VP (VBD walked) (PP (TO to) (NP (DT the) (NN park)))) (. .)))",
    "(TOP (S (NP (NNS Prices)) (VP (VBD rose) (NP (CD 5) (NN %))) (. .)))",
    "(TOP (S (NP (DT This) (NN book)) (VP (VBZ is) (ADJP (JJ interesting))) (. .)))",
]


def write_split(directory, name, trees):
    """prepare_parsing's files: <name>.src, .tgt, .tree (one a line)."""
    parsed = [read_tree(text) for text in trees]
    paths = {}
    for suffix, lines in (("src", [source_text(t) for t in parsed]),
                          ("tgt", [linearize(t) for t in parsed]), ("tree", trees)):
        paths[suffix] = directory / f"{name}.{suffix}"
        paths[suffix].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths




def test_parse_scores_perfect_and_repaired(tmp_path):
    paths = write_split(tmp_path, "test", TREES[:3])
    sources = paths["src"].read_text().splitlines()
    gold = read_gold_trees(paths["tree"], sources, str(paths["src"]))
    perfect = [linearize(tree) for tree in gold]
    trees, scores = parse_scores(perfect, gold)
    assert [score.name for score in scores] == ["F1", "precision", "recall"]
    assert scores[0].value == pytest.approx(100.0)
    assert "COLLINS.prm" in scores[0].signature
    trees, scores = parse_scores(["(S XX", ") ) garbage (", ""], gold)
    assert [tree.words() for tree in trees] == [s.split() for s in sources]
    assert 0.0 <= scores[0].value < 100.0


def test_gold_trees_must_match_the_sentences(tmp_path):
    paths = write_split(tmp_path, "test", TREES[:3])
    sources = paths["src"].read_text().splitlines()
    with pytest.raises(ValueError, match=r"has 3 trees but .*test.src' has 2 sentences"):
        read_gold_trees(paths["tree"], sources[:2], str(paths["src"]))
    with pytest.raises(ValueError, match=r"tree 2: words .* line 2"):
        read_gold_trees(paths["tree"], [sources[0], sources[2], sources[1]], str(paths["src"]))


def test_evaluate_parsing_rejects_bad_options(capsys, tmp_path):
    paths = write_split(tmp_path, "test", TREES[:3])
    with pytest.raises(SystemExit):
        evaluate.parse_args([str(tmp_path), "--task", "parsing", "--src", str(paths["src"])])
    assert "--task parsing: --trees" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.parse_args([str(tmp_path), "--src", str(paths["src"]), "--ref",
                             str(paths["tgt"]), "--trees", str(paths["tree"])])
    assert "only with --task parsing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "parsing", "--train-src", str(paths["src"]),
                          "--train-tgt", str(paths["tgt"]), "--dev-src", str(paths["src"]),
                          "--dev-tgt", str(paths["tgt"]), "--test-src", str(paths["src"]),
                          "--test-tgt", str(paths["tgt"])])
    assert "--test-tree and --test-src go together" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.parse_args(["--test-tree", str(paths["tree"])])
    assert "--test-tree: only with --task parsing" in capsys.readouterr().err


@pytest.mark.slow
def test_train_and_evaluate_parsing(tmp_path, capsys):
    train_paths = write_split(tmp_path, "train", TREES * 7)  # the tokenizer needs > 100 texts
    test_paths = write_split(tmp_path, "test", TREES[:5])
    run_dir = tmp_path / "run"
    assert train.main([
        "--task", "parsing", "--set", "vocab_size=300", "--set", "d_model=16",
        "--set", "d_ff=32", "--set", "num_layers=1", "--set", "num_heads=2",
        "--set", "batch_tokens=512", "--set", "max_length=64", "--set", "max_decode_extra=20",
        "--train-src", str(train_paths["src"]), "--train-tgt", str(train_paths["tgt"]),
        "--dev-src", str(test_paths["src"]), "--dev-tgt", str(test_paths["tgt"]),
        "--test-src", str(test_paths["src"]), "--test-tgt", str(test_paths["tgt"]),
        "--test-tree", str(test_paths["tree"]), "--test-beam-size", "2", "--steps", "2",
        "--eval-every", "2", "--eval-sentences", "2", "--attention-sentences", "0",
        "--no-export", "--output-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "test F1 = " in out
    summary = final_json(out)["test"]
    assert set(summary) >= {"F1", "precision", "recall", "trees"} and "BLEU" not in summary
    assert len(read_tree_file(summary["trees"])) == 5

    hypotheses, trees_out = tmp_path / "out.hyp", tmp_path / "out.parsed.tree"
    assert evaluate.main([str(run_dir), "--task", "parsing", "--src", str(test_paths["src"]),
                          "--trees", str(test_paths["tree"]), "--beam-size", "2",
                          "--alpha", "0.3", "--extra-length", "10",
                          "--hypotheses", str(hypotheses)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("F1 = ")
    result = final_json(out)
    assert result["trees"] == str(trees_out) and result["sentences"] == 5
    assert 0.0 <= result["F1"] <= 100.0 and set(result) >= {"precision", "recall"}
    assert len(hypotheses.read_text(encoding="utf-8").splitlines()) == 5
    lines = trees_out.read_text(encoding="utf-8").splitlines()
    sources = test_paths["src"].read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5
    for line, source in zip(lines, sources):
        tree = read_tree(line)
        assert tree.label == "TOP" and tree.words() == source.split()

    # counts that differ: both files and both counts named; nothing else is loaded first
    short = tmp_path / "short.tree"
    short.write_text("\n".join(TREES[:4]) + "\n", encoding="utf-8")
    assert evaluate.main([str(run_dir), "--task", "parsing", "--src", str(test_paths["src"]),
                          "--trees", str(short)]) == 2
    error = capsys.readouterr().err
    assert "short.tree' has 4 trees but" in error and "test.src' has 5 sentences" in error
    assert evaluate.main([str(run_dir), "--task", "parsing", "--src", str(test_paths["src"]),
                          "--trees", str(test_paths["tree"]),
                          "--output-trees", str(test_paths["tree"])]) == 2
    assert "would overwrite the gold --trees file" in capsys.readouterr().err
