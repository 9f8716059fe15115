"""English constituency parsing as sequence-to-sequence (paper section 6.3).

trees       Tree, read_trees / read_tree / read_tree_file (TreeFormatError names the
source, the 1-based tree index and the line)
preprocess  preprocess(tree): no -NONE- traces, no function tags, TOP root
linearize   source_text(tree), linearize(tree) -> "(S (NP XX ) (VP XX ) XX )",
delinearize(decoded, words, tags=None) -> always a well-formed tree
evalb       score_sentence / score_corpus -> BracketScore (EVALB COLLINS.prm rules)
corpus      SPLITS, treebank_dir, read_split, parallel_text, write_parallel_files
task        trees_from_decoded, evaluate_decoded: what a trainer's `--task parsing` calls
evaluate    read_gold_trees (checked against the sentences), parse_scores -> trees, F1/P/R
"""
