"""`python -m trainers COMMAND [ARGS]`: runs a command line (`trainers.launch.COMMANDS`:
train, prepare, evaluate, average_checkpoints, export, translate, translate_corpus,
prepare_parsing, moses_form, plot_attention) with a quiet start."""
import sys

from trainers.launch import COMMANDS, launch

if len(sys.argv) < 2:
    print(f"usage: python -m trainers COMMAND [ARGS]; COMMAND: {', '.join(COMMANDS)}",
          file=sys.stderr)
    sys.exit(2)
sys.exit(launch(sys.argv[1], sys.argv[2:]))
