"""Refusals name the real problem: a path that does not exist before any option's rule, a
path that is no regular file as such, what an export kind cannot do by its kind."""
import io

import pytest

from trainers import export, train, translate


def test_a_missing_model_is_named_before_the_rules_of_the_options_given(tmp_path, capsys):
    source = tmp_path / "x.en"
    source.write_text("one cat\n", encoding="utf-8")
    nope = tmp_path / "runs" / "nope"
    for flag in (["--beam-size", "8"], ["--ensemble", str(nope)], []):
        assert translate.main([str(nope), str(source), *flag],
                              stdout=io.StringIO()) == 2
        assert f"model: {str(nope)!r} does not exist" in capsys.readouterr().err, flag
    with pytest.raises(SystemExit):
        export.parse_args([str(nope), "--name", "x", "--format", "litert"])
    assert f"model: {str(nope)!r} does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(["--init-from", str(nope), "--pair", "en-de", str(source), str(source),
                    "--dev-pair", "en-de", str(source), str(source),
                    "--output-dir", str(tmp_path / "run")])
    assert f"--init-from: {str(nope)!r} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_glossary_that_is_no_regular_file_or_has_no_entries_is_named(tmp_path, capsys):
    source = tmp_path / "x.en"
    source.write_text("one cat\n", encoding="utf-8")
    for path, problem in (("/dev/null", "is not a regular file (a device, pipe or socket)"),
                          (str(tmp_path), "is not a regular file (a directory)"),
                          (str(tmp_path / "none.txt"), "does not exist")):
        with pytest.raises(SystemExit):
            translate.parse_args([str(tmp_path), str(source), "--terms", path])
        assert f"--terms: {path!r} {problem}" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing yet\n\n", encoding="utf-8")
    args = translate.parse_args([str(tmp_path), str(source), "--terms", str(empty)])
    assert translate.read_terms(args.terms, args.constraints, [([b"one cat"], [])]) == [[""]]
    assert f"--terms: {empty} has no entries" in capsys.readouterr().err
