"""The command lines (kt-train, kt-evaluate, kt-average-checkpoints, kt-export, kt-translate,
and `python -m trainers prepare_parsing|plot_attention`): thin layers over the library, started
by `trainers.launch`."""
